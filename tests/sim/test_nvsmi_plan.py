"""The fake nvidia-smi's ``-i <bus>,... -pl <W>`` made by its shell part (joulectl/sim/tools/nvplan.py):
what it prints, the exit code, the state file and the answers it leaves are byte for byte those of
the Python tool, for every case it takes; every other case, and every failure on its way, runs the
Python tool. Each comparison runs one tree through the script (the shell where it may) and a copy
through the Python tool directly (``python -S bin/nvidia-smi``), from the same prepared state.

Who answered is told by ``PYTHONPROFILEIMPORTTIME=1`` (tests/sim/test_nvsmi_fast.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from joulectl.sim import runtime
from joulectl.sim.profiles import BOARDS_DIR
from joulectl.sim.tools import nvfast
from tests.sim.conftest import render_one, ticked_h100

INV = ("--query-gpu=pci.bus_id,uuid,power.min_limit,power.max_limit,power.default_limit,power.limit,"
       "enforced.power.limit,power.draw,mig.mode.current,persistence_mode,name", "--format=csv,noheader,nounits")
RB = ("--query-gpu=pci.bus_id,power.limit,enforced.power.limit", "--format=csv,noheader,nounits")
ANSWERS = ("inv", "rb", "pl", "plw")

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in nvfast.SET_TOOLS) or not os.path.isfile("/bin/sh"),
                                reason="the shell's -pl needs /bin/sh, flock, ln, touch and mv")


def tool(tree: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, who answered: "shell" or "python") of ``bin/nvidia-smi ARGS``."""
    r = subprocess.run([str(tree / "bin/nvidia-smi"), *args], capture_output=True, text=True, timeout=60,
                       check=False, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1", **(env or {})})
    who = "python" if "import time:" in r.stderr else "shell"
    assert who == "python" or r.stderr == "", r.stderr
    return r.returncode, r.stdout, who


def python_tool(tree: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-S", str(tree / "bin/nvidia-smi"), *args], capture_output=True, text=True,
                       timeout=60, check=False, env={**os.environ, **(env or {})})
    assert r.stderr == ""
    return r.returncode, r.stdout


def copy(tree: Path, to: Path) -> Path:
    """The tool's part of a node (bin/ and state/, the answers' hard links kept: ``cp -a``)."""
    to.mkdir(parents=True)
    subprocess.run(["cp", "-a", str(tree / "bin"), str(tree / "state"), str(to)], check=True)
    return to


def files(tree: Path) -> dict[str, bytes]:
    out = {"nvml.json": (tree / "state/nvml.json").read_bytes()}
    for name in ANSWERS:
        path = tree / "state/nvsmi-answers" / name
        out[name] = path.read_bytes() if path.exists() else b""
    return out


def prepared(tree: Path) -> Path:
    """The inventory answered once (by Python, which prepares the answers and the plan)."""
    tool(tree, *INV)
    assert tool(tree, *INV)[2] == "shell"
    assert (tree / "state/nvsmi-answers/plw").is_file()
    return tree


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nvplan")
    return {
        "h100": prepared(render_one(root, "nvidia-h100-sxm-8gpu", "h")),
        "l40s": prepared(render_one(root, "nvidia-l40s-4gpu", "l")),
        # the platform holds every GPU at 500 W: a -pl above it is requested, not enforced
        "platform": prepared(render_one(root, "nvidia-h100-sxm-8gpu", "p",
                                        {"gpus": {"nvmlConfig": os.path.join(BOARDS_DIR, "h100-platform-500w.yaml")}})),
        # a token instead of the minimum: the Python tool refuses -pl with a message
        "tok": prepared(render_one(root, "nvidia-h100-sxm-8gpu", "t", {"gpus": {"fieldSupport": {
            "power.min_limit": "[N/A]"}}})),
        # not settable in this scope (R535+): the Python tool's message
        "cloud": prepared(render_one(root, "nvidia-h100-sxm-8gpu", "c",
                                     {"gpus": {"nvmlConfig": os.path.join(BOARDS_DIR, "h100-cloud.yaml")}})),
    }


def buses(tree: Path) -> list[str]:
    return [g["busId"] for g in json.loads((tree / "state/nvml.json").read_text())["gpus"]]


def same_as_python(node: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``args`` on two copies of ``node``, by the script and by the Python tool; assert the same
    output, exit code, state and answers (and, after a write, the same queries, served by the
    shell); return who answered the script."""
    ours, theirs = copy(node, tmp_path / "script"), copy(node, tmp_path / "python")
    code, out, who = tool(ours, *args, env=env)
    assert (code, out) == python_tool(theirs, *args, env=env), args
    assert files(ours) == files(theirs), args
    if code == 0 and who == "shell":
        state = os.stat(ours / "state/nvml.json")
        for name in ("inv", "rb", "pl", "csv.state"):  # dated as publish() dates them, the link to the state
            st = os.stat(ours / "state/nvsmi-answers" / name)
            assert st.st_mtime_ns == state.st_mtime_ns, name
        assert os.stat(ours / "state/nvsmi-answers/csv.state").st_ino == state.st_ino
        assert os.listdir(ours / "state/nvsmi-answers/.sh") == []
        assert [p for p in os.listdir(ours / "state") if p.endswith(".tmp") and p != ".tmp"] == []
        for query in (INV, RB):
            assert tool(ours, *query)[1:] == (python_tool(theirs, *query)[1], "shell")
    shutil.rmtree(tmp_path / "script")
    shutil.rmtree(tmp_path / "python")
    return who


def test_the_script_is_python_without_warnings(nodes: dict[str, Path]) -> None:
    text = (nodes["h100"] / "bin/nvidia-smi").read_text()
    assert "_pl " in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an invalid escape in the shell part would warn (3.12: SyntaxWarning)
        compile(text, "nvidia-smi", "exec")


@pytest.mark.parametrize("name", ["h100", "l40s", "platform", "tok", "cloud"])
def test_random_writes_are_the_python_tools(nodes: dict[str, Path], tmp_path: Path, name: str) -> None:
    node = nodes[name]
    rng = random.Random(f"nvplan-{name}")
    every = buses(node)
    power = json.loads((node / "state/nvml.json").read_text())["gpus"][0]["power"]
    lo, hi = power["minLimitMw"] // 1000, power["maxLimitMw"] // 1000
    who = set()
    for case in range(6):
        chosen = rng.sample(every, rng.randint(1, len(every)))
        watts = rng.choice([rng.randint(lo, hi), rng.randint(lo - 50, hi + 50), round(rng.uniform(lo, hi), 1),
                            round(rng.uniform(lo, hi), 2)])
        text = f"{watts:.2f}".rstrip("0").rstrip(".")  # as joulectl's backend spells watts
        who.add(same_as_python(node, tmp_path / str(case), "-i", ",".join(chosen), "-pl", text))
    if name in ("tok", "cloud"):  # every GPU one the Python tool answers with a message of its own
        assert who == {"python"}
    else:
        assert "shell" in who


@pytest.mark.parametrize(("watts", "who"), [
    ("450", "shell"), ("450.5", "shell"), ("450.25", "shell"), ("450.", "shell"), ("200", "shell"), ("700", "shell"),
    ("199.99", "python"), ("700.01", "python"), ("0450", "python"), ("450.125", "python"), (".5", "python"),
    ("4.5e2", "python"), ("-450", "python"), ("0", "python"), ("450W", "python"), ("1000000", "python"), ("", "python"),
])
def test_watts_the_shell_takes(nodes: dict[str, Path], tmp_path: Path, watts: str, who: str) -> None:
    node = nodes["h100"]
    assert same_as_python(node, tmp_path, "-i", ",".join(buses(node)[:3]), "-pl", watts) == who


@pytest.mark.parametrize(("ids", "who"), [
    ("00000000:18:00.0", "shell"),
    ("00000000:DB:00.0,00000000:18:00.0", "shell"),  # the order given is the order printed
    ("0", "python"), ("0,1", "python"),  # indices
    ("00000000:18:00.0,00000000:18:00.0", "python"),  # the same GPU twice
    ("00000000:18:00.0,0", "python"),  # the same GPU by two names
    ("0000:18:00.0", "python"), ("00000000:db:00.0", "python"),  # other spellings
    ("GPU-6f3c2a10-8b1d-4e2f-9a7c-0d5e1f2a3b00", "python"),  # a UUID
    ("00000000:18:00.0,", "python"), (",", "python"), ("", "python"),
    ("00000000:99:00.0", "python"),  # no such GPU
    ("00000000:18:00.0 ", "python"),
])
def test_ids_the_shell_takes(nodes: dict[str, Path], tmp_path: Path, ids: str, who: str) -> None:
    assert same_as_python(nodes["h100"], tmp_path, "-i", ids, "-pl", "450") == who


@pytest.mark.parametrize("args", [
    ("-pl", "450", "-i", "00000000:18:00.0"), ("--id=00000000:18:00.0", "-pl", "450"),
    ("-i", "00000000:18:00.0", "--power-limit=450"), ("-i", "00000000:18:00.0", "-pl", "450", "-eow"),
    ("-pl", "450"),
])
def test_other_argument_lists_run_python(nodes: dict[str, Path], tmp_path: Path, args: tuple[str, ...]) -> None:
    assert same_as_python(nodes["h100"], tmp_path, *args) == "python"


def test_unprivileged_runs_python(nodes: dict[str, Path], tmp_path: Path) -> None:
    args = ("-i", "00000000:18:00.0", "-pl", "450")
    assert same_as_python(nodes["h100"], tmp_path, *args, env={"HWEMU_UNPRIVILEGED": "1"}) == "python"


def test_a_platform_below_the_request_is_enforced(nodes: dict[str, Path], tmp_path: Path) -> None:
    node = copy(nodes["platform"], tmp_path / "n")
    assert tool(node, "-i", "00000000:18:00.0,00000000:2A:00.0", "-pl", "600")[2] == "shell"
    rb = tool(node, *RB)[1].splitlines()
    assert rb[:3] == ["00000000:18:00.0, 600.00, 500.00", "00000000:2A:00.0, 600.00, 500.00",
                      "00000000:3A:00.0, 700.00, 500.00"]
    assert tool(node, "-i", "00000000:18:00.0", "-pl", "450")[2] == "shell"
    assert tool(node, *RB)[1].splitlines()[0] == "00000000:18:00.0, 450.00, 450.00"


def test_writes_one_after_another_stay_with_the_shell(nodes: dict[str, Path], tmp_path: Path) -> None:
    ours, theirs = copy(nodes["h100"], tmp_path / "a"), copy(nodes["h100"], tmp_path / "b")
    for watts in ("300", "650.5", "300", "700"):
        args = ("-i", ",".join(buses(ours)[::2]), "-pl", watts)
        code, out, who = tool(ours, *args)
        assert (code, out, who) == (*python_tool(theirs, *args), "shell")
    assert files(ours) == files(theirs)


def test_the_state_lock_is_held(nodes: dict[str, Path], tmp_path: Path) -> None:
    """The shell takes the lock every writer of the state takes, and writes only once it has it."""
    node = copy(nodes["h100"], tmp_path / "n")
    before = (node / "state/nvml.json").read_bytes()
    fd = os.open(node / "state/nvml.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    proc = subprocess.Popen([str(node / "bin/nvidia-smi"), "-i", "00000000:18:00.0", "-pl", "450"],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # not a measure of speed: the time it has to write if it did not wait
        assert proc.poll() is None
        assert (node / "state/nvml.json").read_bytes() == before
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    out, _ = proc.communicate(timeout=60)
    assert out.endswith("All done.\n") and proc.returncode == 0
    assert json.loads((node / "state/nvml.json").read_text())["gpus"][0]["power"]["limitMw"] == 450000


def test_a_hand_edit_in_place_right_after_the_shells_write_falls_back(nodes: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    node = copy(nodes["h100"], tmp_path / "n")
    assert tool(node, "-i", "00000000:18:00.0", "-pl", "500")[2] == "shell"
    path = node / "state/nvml.json"
    text = path.read_text()
    with open(path, "r+") as fh:  # the same inode and size, at once: only the backdated mtime tells
        fh.write(text.replace('"limitMw":500000', '"limitMw":510000', 1))
    code, out, who = tool(node, *RB)
    assert (code, who, out.splitlines()[0]) == (0, "python", "00000000:18:00.0, 510.00, 500.00")
    assert tool(node, "-i", "00000000:18:00.0", "-pl", "520")[2] == "shell"  # prepared again by that query


def test_answers_of_another_state_send_the_write_to_python(nodes: dict[str, Path], tmp_path: Path) -> None:
    node = copy(nodes["h100"], tmp_path / "n")
    state = json.loads((node / "state/nvml.json").read_text())
    state["gpus"][0]["power"]["maxLimitMw"] = 400000  # replaced by a rename: the plan is not this state's
    (node / "state/edit.json").write_text(json.dumps(state))
    os.replace(node / "state/edit.json", node / "state/nvml.json")
    code, out, who = tool(node, "-i", "00000000:18:00.0", "-pl", "450")
    assert (code, who) == (2, "python") and "is not a valid power limit" in out


def test_a_missing_plan_or_staging_directory_runs_python(nodes: dict[str, Path], tmp_path: Path) -> None:
    for victim in ("plw", "pl", ".sh"):
        node = copy(nodes["h100"], tmp_path / victim)
        path = node / "state/nvsmi-answers" / victim
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        assert same_as_python(node, tmp_path / f"{victim}-cmp", "-i", "00000000:18:00.0", "-pl", "450") == "python"


def _failing(node: Path, program: str) -> None:
    """Render the node's tool with ``program`` replaced by ``false``."""
    tools = {name: shutil.which(name) or "" for name in nvfast.SET_TOOLS}
    tools[program] = shutil.which("false") or "/bin/false"
    script = nvfast.launcher(sys.executable, str(Path(nvfast.__file__).parents[3]), shutil.which("date") or "",
                             shutil.which("cat") or "", tools)
    (node / "bin/nvidia-smi").write_bytes(script)


def _nothing_left(node: Path) -> None:
    assert [p for p in os.listdir(node / "state") if p.endswith(".tmp") and p != ".tmp"] == []
    assert os.listdir(node / "state/nvsmi-answers/.sh") == []


@pytest.mark.parametrize("failing", ["touch", "ln"])
def test_a_program_failing_before_the_state_is_replaced_leaves_the_write_to_python(
        nodes: dict[str, Path], tmp_path: Path, failing: str) -> None:
    """A program of the shell's write that fails (here: replaced by ``false``) before the state is
    replaced: the Python tool writes instead, and what is left is what it leaves."""
    node = copy(nodes["h100"], tmp_path / "n")
    _failing(node, failing)
    reference = copy(nodes["h100"], tmp_path / "ref")
    args = ("-i", "00000000:18:00.0,00000000:2A:00.0", "-pl", "450")
    code, out, who = tool(node, *args)
    assert (code, out, who) == (*python_tool(reference, *args), "python")
    assert files(node) == files(reference)
    assert tool(node, *RB) == (0, python_tool(reference, *RB)[1], "shell")
    _nothing_left(node)


def test_answers_that_cannot_be_moved_after_the_write_are_not_served(nodes: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    """The state replaced, the answers not moved into place (``mv`` fails): the write is done and
    said, once; the old answers are not served for the new state, and the next query prepares
    them again."""
    node = copy(nodes["h100"], tmp_path / "n")
    _failing(node, "mv")
    reference = copy(nodes["h100"], tmp_path / "ref")
    args = ("-i", "00000000:18:00.0,00000000:2A:00.0", "-pl", "450")
    code, out, who = tool(node, *args)
    assert (code, out, who) == (*python_tool(reference, *args), "shell")
    assert (node / "state/nvml.json").read_bytes() == (reference / "state/nvml.json").read_bytes()
    _nothing_left(node)
    assert tool(node, *RB) == (0, python_tool(reference, *RB)[1], "python")  # which prepares them all again
    for query in (RB, INV):
        assert tool(node, *query) == (0, python_tool(reference, *query)[1], "shell")


def test_a_file_left_in_the_staging_directory_is_never_written_into(nodes: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """An attempt that died after putting the new state in place leaves ``.sh/csv.state``, a link
    to the state: the next write does not write into it (that would edit the state in place),
    removes it and leaves the write to Python."""
    node = copy(nodes["h100"], tmp_path / "n")
    reference = copy(nodes["h100"], tmp_path / "ref")
    state = node / "state/nvml.json"
    before = state.read_bytes()
    os.link(state, node / "state/nvsmi-answers/.sh/csv.state")
    os.link(state, tmp_path / "old-state")  # the inode, whatever the names do
    args = ("-i", "00000000:18:00.0", "-pl", "450")
    assert tool(node, *args) == (*python_tool(reference, *args), "python")
    assert (tmp_path / "old-state").read_bytes() == before  # the old inode never written
    assert state.read_bytes() == (reference / "state/nvml.json").read_bytes()
    _nothing_left(node)


def test_a_tick_after_the_shells_write_keeps_it(tmp_path: Path) -> None:
    spec, root = ticked_h100(tmp_path)
    node = prepared(root / "h100-0")
    assert tool(node, "-i", "00000000:18:00.0", "-pl", "300")[2] == "shell"
    runtime.run(spec, str(root), ticks=1, fast=True)
    gpu = json.loads((node / "state/nvml.json").read_text())["gpus"][0]
    assert (gpu["power"]["limitMw"], gpu["power"]["enforcedLimitMw"]) == (300000, 300000)
    assert gpu["power"]["drawMw"] <= 300000  # the tick holds the GPU's draw to the new limit
    code, out, who = tool(node, *RB)  # the tick replaced the state: Python answers, from its state
    assert (code, who, out.splitlines()[0]) == (0, "python", "00000000:18:00.0, 300.00, 300.00")


@pytest.mark.parametrize("broken", [
    {"limitMw": None}, {"limitMw": 700000.0}, {"enforcedLimitMw": None}, {"enforcedLimitMw": "700000"},
])
def test_no_plan_for_a_state_without_integer_limits_or_bus_ids(nodes: dict[str, Path],
                                                               broken: dict[str, object]) -> None:
    """A hand-edited state whose limits are not integers, or a GPU without a bus id: no plan (every
    -pl goes to the Python tool, which says what it says of such a state); the good state has one."""
    from joulectl.sim.tools import nvplan, nvsmi
    from joulectl.sim.tools.state import dumps

    def plan(state: dict[str, object]) -> dict[str, str] | None:
        return nvplan.plan(state, lambda g: True, dumps, lambda twin: nvsmi._answers(twin, ("inv", "rb"), plan=False))

    state = json.loads((nodes["h100"] / "state/nvml.json").read_text())
    assert plan(state) is not None
    gpu = state["gpus"][3]
    gpu["power"].update(broken)
    assert plan(state) is None
    fine = json.loads((nodes["h100"] / "state/nvml.json").read_text())
    fine["gpus"][3]["busId"] = 18
    assert plan(fine) is None
