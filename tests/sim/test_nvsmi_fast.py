"""The fake nvidia-smi's shell fast path (joulectl/sim/tools/nvfast.py): the two read-only queries
joulectl sends are printed from prepared answers while those are valid, byte-identical to what the
Python tool prints (but for the current time), and Python answers in every other case.

Who answered is told by ``PYTHONPROFILEIMPORTTIME=1``: the Python tool then writes its import
times to stderr, the shell writes nothing there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from joulectl.sim import runtime
from joulectl.sim.tools import nvfast
from tests.sim.conftest import render_one, ticked_h100

QX = ("-q", "-x")
RB = ("--query-gpu=pci.bus_id,power.limit,enforced.power.limit", "--format=csv,noheader,nounits")
INV = ("--query-gpu=pci.bus_id,uuid,power.min_limit,power.max_limit,power.default_limit,power.limit,"
       "enforced.power.limit,power.draw,mig.mode.current,persistence_mode,name", "--format=csv,noheader,nounits")
H100_RB = """\
00000000:18:00.0, 700.00, 700.00
00000000:2A:00.0, 700.00, 700.00
00000000:3A:00.0, 700.00, 700.00
00000000:5D:00.0, 700.00, 700.00
00000000:9A:00.0, 700.00, 700.00
00000000:AB:00.0, 700.00, 700.00
00000000:BA:00.0, 700.00, 700.00
00000000:DB:00.0, 700.00, 700.00
"""
TIMESTAMP = re.compile(r"^\t<timestamp>(\w{3} \w{3} \d{2} \d{2}:\d{2}:\d{2} \d{4})</timestamp>$", re.M)


def smi(tree: Path, *args: str, cwd: Path | None = None, exe: str | None = None) -> tuple[str, str]:
    """(stdout, who answered: "shell" or "python") of ``bin/nvidia-smi ARGS``."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    r = subprocess.run([exe or str(tree / "bin/nvidia-smi"), *args], capture_output=True, text=True, env=env,
                       timeout=60, check=False, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    who = "python" if "import time:" in r.stderr else "shell"
    assert who == "python" or r.stderr == "", r.stderr
    return r.stdout, who


def python_tool(tree: Path, *args: str) -> str:
    """What the Python tool prints (the same script run by the interpreter, past the shell part)."""
    r = subprocess.run([sys.executable, "-S", str(tree / "bin/nvidia-smi"), *args], capture_output=True, text=True,
                       timeout=60, check=True)
    assert r.stderr == ""
    return r.stdout


def untimed(xml: str) -> str:
    return TIMESTAMP.sub("\t<timestamp>T</timestamp>", xml)


def served_answers(tree: Path) -> None:
    """Prepare the answers (a first call of each form, answered by Python)."""
    for form in (QX, RB, INV):
        smi(tree, *form)
    assert smi(tree, *RB)[1] == "shell"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nvfast")
    return {
        "h100": render_one(root, "nvidia-h100-sxm-8gpu", "h"),
        "l40s": render_one(root, "nvidia-l40s-4gpu", "l"),
        "tok": render_one(root, "nvidia-h100-sxm-8gpu", "t", {"gpus": {"fieldSupport": {"power.min_limit": "[N/A]"}}}),
        "mig": render_one(root, "nvidia-h100-sxm-8gpu", "m", {"gpus": {"exposure": "mig-mixed"}}),
    }


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    return render_one(tmp_path, "nvidia-h100-sxm-8gpu", "h")


def test_the_forms_are_the_backends_queries() -> None:
    from joulectl.backends import nvidia

    forms = {"qx": nvidia.QUERY_ARGV, "rb": nvidia.READBACK_ARGV, "inv": nvidia.INVENTORY_ARGV}
    assert {name: argv[1:] for name, argv in forms.items()} == nvfast.FORMS
    from joulectl.sim.tools import nvsmi

    assert set(nvsmi._ALL_ANSWERS) == set(nvfast.FORMS)  # what a query answered by Python prepares


def test_a_fresh_node_is_answered_by_python_then_by_the_shell(h100: Path) -> None:
    assert not (h100 / "state/nvsmi-answers").exists()  # the renderer prepares nothing
    out, who = smi(h100, *RB)
    assert (out, who) == (H100_RB, "python")
    out, who = smi(h100, *RB)
    assert (out, who) == (H100_RB, "shell")
    # the -q -x answer was prepared by the readback's call too
    assert smi(h100, *QX)[1] == "shell"


@pytest.mark.parametrize("name", ["h100", "l40s", "tok", "mig"])
def test_shell_answers_are_the_python_tools(trees: dict[str, Path], name: str) -> None:
    tree = trees[name]
    served_answers(tree)
    rb, who = smi(tree, *RB)
    assert who == "shell"
    assert rb == python_tool(tree, *RB)
    if name == "h100":
        assert rb == H100_RB
    inv, who = smi(tree, *INV)
    assert who == "shell"
    assert inv == python_tool(tree, *INV) and inv.count("\n") == {"l40s": 4}.get(name, 8)
    qx = shell_qx(tree)
    assert qx.count("<gpu id=") == {"l40s": 4}.get(name, 8)


def shell_qx(tree: Path) -> str:
    """The ``-q -x`` answer the shell prints: the prepared one with the current local time."""
    before = time.time()
    qx, who = smi(tree, *QX)
    after = time.time()
    assert who == "shell"
    assert qx.encode() == (tree / "state/nvsmi-answers/qx").read_bytes() or untimed(qx) == untimed(
        (tree / "state/nvsmi-answers/qx").read_text())
    assert untimed(qx) == untimed(python_tool(tree, *QX))
    assert qx.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
                         "<nvidia_smi_log>\n\t<timestamp>")
    (stamp,) = TIMESTAMP.findall(qx)
    printed = time.mktime(time.strptime(stamp, "%a %b %d %H:%M:%S %Y"))
    assert int(before) <= printed <= after  # the current local time, not the answer's
    return qx


def test_the_answer_is_printed_by_awk_where_it_has_strftime(trees: dict[str, Path]) -> None:
    # Debian's mawk has strftime: one program prints the answer, not date and cat
    from joulectl.sim.gpu_tree import awk_with_strftime

    script = (trees["h100"] / "bin/nvidia-smi").read_text()
    if shutil.which("mawk") or shutil.which("gawk"):
        assert awk_with_strftime() is not None
    if awk_with_strftime() is not None:
        assert "strftime(" in script and "/date'" not in script.split("_pl()")[0]


def test_without_an_awk_with_strftime_date_and_cat_print_the_answer(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from joulectl.sim import gpu_tree, template

    monkeypatch.setattr(gpu_tree, "awk_with_strftime", lambda: None)
    monkeypatch.setattr(template, "_TEMPLATES", {})  # the profile's layout made again, with this script
    tree = render_one(tmp_path, "nvidia-h100-sxm-8gpu", "h")
    script = (tree / "bin/nvidia-smi").read_text()
    assert "strftime(" not in script and "/date'" in script
    served_answers(tree)
    assert shell_qx(tree).count("<gpu id=") == 8


@pytest.mark.parametrize(("program", "found"), [
    ("#!/bin/sh\necho 'awk: function strftime never defined' >&2\nexit 2\n", False),  # the one true awk
    ("#!/bin/sh\nprintf 1971\n", False),  # a wrong answer
    ("#!/bin/sh\nprintf 1970\n", True),
])
def test_an_awk_is_used_only_where_its_strftime_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        program: str, found: bool) -> None:
    from joulectl.sim.gpu_tree import awk_with_strftime

    (tmp_path / "awk").write_text(program)
    (tmp_path / "awk").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    awk_with_strftime.cache_clear()
    try:
        assert awk_with_strftime() == (str(tmp_path / "awk") if found else None)
    finally:
        awk_with_strftime.cache_clear()


def test_other_argument_lists_run_python(trees: dict[str, Path]) -> None:
    tree = trees["h100"]
    served_answers(tree)
    for args in (("-x", "-q"), ("-q", "-x", "-i", "0"), ("-q", "-x", "-d", "POWER"),
                 ("--query-gpu=power.limit", "--format=csv"), (RB[0], "--format=csv,noheader"), ("-q",), ("-L",)):
        assert smi(tree, *args)[1] == "python", args
    assert smi(tree, *RB)[1] == "shell"  # and those calls did not spoil the answers


def test_a_relative_or_unusual_script_path_runs_python(trees: dict[str, Path]) -> None:
    tree = trees["h100"]
    served_answers(tree)
    assert smi(tree, *RB, cwd=tree, exe="bin/nvidia-smi") == (H100_RB, "python")
    assert smi(tree, *RB, exe=f"{tree}/bin/../bin/nvidia-smi") == (H100_RB, "python")
    assert smi(tree, *RB, exe=f"{tree}/./bin/nvidia-smi") == (H100_RB, "python")
    # each of those calls prepared the answers of a state they were already prepared for: the
    # temporary links of that (a rename of a link onto the same inode does nothing) are gone
    assert sorted(os.listdir(tree / "state/nvsmi-answers")) == [".sh", "csv.state", "inv", "pl", "plw", "qx",
                                                                "qx.state", "rb"]


def test_after_pl_the_readback_is_the_shells_and_shows_the_write(h100: Path) -> None:
    served_answers(h100)
    r = subprocess.run([str(h100 / "bin/nvidia-smi"), "-i", "00000000:18:00.0,00000000:2A:00.0", "-pl", "450"],
                       capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.endswith("All done.\n")
    out, who = smi(h100, *RB)
    assert who == "shell"
    assert out == H100_RB.replace("18:00.0, 700.00, 700.00", "18:00.0, 450.00, 450.00").replace(
        "2A:00.0, 700.00, 700.00", "2A:00.0, 450.00, 450.00")
    inv, who = smi(h100, *INV)
    assert who == "shell"
    assert inv.count(", 450.00, 450.00, ") == 2
    # the -q -x document is not prepared by a write (a third of its work): Python answers it, and
    # prepares it
    qx, who = smi(h100, *QX)
    assert who == "python"
    assert qx.count("<requested_power_limit>450.00 W</requested_power_limit>") == 2
    assert smi(h100, *QX)[1] == "shell"
    assert untimed(qx) == untimed(python_tool(h100, *QX))
    assert inv == python_tool(h100, *INV)


def test_a_failed_pl_leaves_valid_answers_valid(h100: Path) -> None:
    served_answers(h100)
    r = subprocess.run([str(h100 / "bin/nvidia-smi"), "-i", "0", "-pl", "5000"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2 and "is not a valid power limit" in r.stdout
    assert smi(h100, *RB) == (H100_RB, "shell")


def _edit_in_place(tree: Path, old: str, new: str) -> None:
    path = tree / "state/nvml.json"
    inode = path.stat().st_ino
    text = path.read_text()
    assert old in text and len(old) == len(new)
    with open(path, "r+") as fh:  # the same inode, the same size: only the mtime tells
        fh.write(text.replace(old, new, 1))
    assert path.stat().st_ino == inode


def test_a_hand_edit_in_place_right_after_the_answers_falls_back(h100: Path) -> None:
    served_answers(h100)
    # -pl writes the state and prepares the answers; the edit follows at once (often within the
    # same tick of the kernel's coarse clock as the state's write)
    subprocess.run([str(h100 / "bin/nvidia-smi"), "-i", "0", "-pl", "500"], capture_output=True, timeout=60, check=True)
    _edit_in_place(h100, '"limitMw":500000', '"limitMw":510000')
    out, who = smi(h100, *RB)
    assert who == "python"
    assert out.splitlines()[0] == "00000000:18:00.0, 510.00, 500.00"  # the enforced limit is the tick's to redo
    assert smi(h100, *RB) == (out, "shell")


def test_a_hand_edit_by_rename_falls_back(h100: Path) -> None:
    served_answers(h100)
    path = h100 / "state/nvml.json"
    state = json.loads(path.read_text())
    state["gpus"][7]["power"]["limitMw"] = 300_000
    tmp = h100 / "state/edited.json"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)
    out, who = smi(h100, *RB)
    assert who == "python"
    assert out.splitlines()[-1] == "00000000:DB:00.0, 300.00, 700.00"
    qx, who = smi(h100, *QX)
    assert who == "shell"  # prepared by the readback's call from the edited state
    assert "<requested_power_limit>300.00 W</requested_power_limit>" in qx


def test_a_tick_invalidates_the_answers(tmp_path: Path) -> None:
    spec, root = ticked_h100(tmp_path)
    tree = root / "h100-0"
    served_answers(tree)
    qx_before, who = smi(tree, *QX)
    assert who == "shell"
    runtime.run(spec, str(root), ticks=1, fast=True)
    qx_after, who = smi(tree, *QX)
    assert who == "python"
    state = json.loads((tree / "state/nvml.json").read_text())
    draws = re.findall(r"<instant_power_draw>([\d.]+) W</instant_power_draw>", qx_after)
    assert draws == [f"{g['power']['drawMw'] / 1000:.2f}" for g in state["gpus"]]
    assert untimed(qx_after) != untimed(qx_before)  # the tick moved energy, draw or clocks
    assert smi(tree, *QX)[1] == "shell"


def test_a_copy_without_hard_links_falls_back(h100: Path, tmp_path: Path) -> None:
    served_answers(h100)
    copy = tmp_path / "copy"
    shutil.copytree(h100, copy, symlinks=True)  # copies each link as its own file
    # (the launcher names the Python of this checkout, so the copy runs the same tool)
    assert smi(copy, *RB) == (H100_RB, "python")
    assert smi(copy, *RB) == (H100_RB, "shell")


def test_publish_writes_nothing_for_a_state_replaced_since_it_was_read(h100: Path) -> None:
    st = os.stat(h100 / "state/nvml.json")
    state = json.loads((h100 / "state/nvml.json").read_text())
    (h100 / "state/new.json").write_text(json.dumps(state))
    os.replace(h100 / "state/new.json", h100 / "state/nvml.json")
    from joulectl.sim.tools import nvsmi

    answers = nvsmi._answers(state, ("inv",), plan=False)
    assert answers is not None
    inv = answers["inv"]
    assert nvfast.publish(str(h100), {"rb": H100_RB, "inv": inv}, st) is False
    assert os.listdir(h100 / "state/nvsmi-answers") == []
    # and an answer with no timestamp line for -q -x, or not ASCII, is not published
    st = os.stat(h100 / "state/nvml.json")
    assert nvfast.publish(str(h100), {"qx": "<nvidia_smi_log>\n</nvidia_smi_log>\n"}, st) is False
    assert nvfast.publish(str(h100), {"rb": "é\n", "inv": inv}, st) is False
    assert nvfast.publish(str(h100), {"rb": H100_RB.rstrip("\n"), "inv": inv}, st) is False  # whole lines only
    # the two CSV answers share their link (csv.state): prepared together, or neither
    assert nvfast.publish(str(h100), {"rb": H100_RB}, st) is False
    assert os.listdir(h100 / "state/nvsmi-answers") == []
    assert nvfast.publish(str(h100), {"rb": H100_RB, "inv": inv}, st) is True
    assert sorted(os.listdir(h100 / "state/nvsmi-answers")) == ["csv.state", "inv", "rb"]
