"""The Host layer under fuzzing and attack: attribute contents of every shape, paths from any
input, symlinks that escape the root, symlink loops, and tool arguments (never a shell, no NUL)."""

from __future__ import annotations

import errno
import json
import os
import random
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl.errors import ConfinementError, ExitCode
from joulectl.host import MAX_ATTR_BYTES, Host, HostIOError, ToolNotFound

FUZZ = settings(max_examples=examples(2000), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

ATTR_BYTES = (
    st.binary(max_size=64)
    | st.from_regex(rb"\A[ \t\n]*[+-]?\d{1,30}[ \t\n]*(\w{0,5})?[ \t\n]*\Z")
    | st.sampled_from([b"", b"\n", b" \n\t", b"-1\n", b"18446744073709551615\n", b"0x1f\n", b"1e3\n",
                       b"\xff\xfe\n", b"250000000 [N/A]\n", b"nan\n", b"\x00\x00", b"\xe2\x82\xac\n"])
)


@pytest.fixture(scope="module")
def attr_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("attr-root")
    (root / "sys").mkdir()
    return root


@FUZZ
@given(ATTR_BYTES)
def test_read_attr_and_read_int_never_raise(attr_root: Path, data: bytes) -> None:
    (attr_root / "sys" / "attr").write_bytes(data)
    host = Host(str(attr_root))
    attr = host.read_attr("/sys/attr")
    assert attr.ok and attr.errno is None
    text = data.decode("utf-8", errors="replace")
    assert attr.value == text.strip()
    assert (attr.reason == "empty") == (attr.value == "")
    n = host.read_int("/sys/attr")
    first = text.split()[0] if text.split() else ""
    # strict (issue 12, item 7): plain ASCII digits of a u64 only; no sign, "_", other scripts' digits
    plain = first.isascii() and first.isdigit() and len(first.lstrip("0")) <= 20
    expected = int(first) if plain and int(first) < 1 << 64 else None
    assert n == expected


def test_huge_attribute_is_unknown_with_efbig(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "big").write_bytes(b"1" * (MAX_ATTR_BYTES + 1))
    host = Host(str(tmp_path))
    attr = host.read_attr("/sys/big")
    assert attr.value is None and attr.reason == "EFBIG"
    assert host.read_int("/sys/big") is None


@pytest.mark.parametrize("size", [0, 4095, 4096, 4097, 300_000, MAX_ATTR_BYTES])
def test_files_up_to_the_limit_are_read_whole(tmp_path: Path, size: int) -> None:
    """The first read takes a page; anything larger (a big host's /proc/cpuinfo) is read on."""
    (tmp_path / "proc").mkdir()
    data = bytes(ord("a") + i % 26 for i in range(size))
    (tmp_path / "proc" / "cpuinfo").write_bytes(data)
    assert Host(str(tmp_path)).read("/proc/cpuinfo") == data.decode()
    assert Host(str(tmp_path)).read("/proc/cpuinfo", limit=size) == data.decode()
    if size:
        with pytest.raises(HostIOError) as e:
            Host(str(tmp_path)).read("/proc/cpuinfo", limit=size - 1)
        assert e.value.errno == errno.EFBIG


@pytest.mark.skipif(not Path("/proc/kallsyms").is_file(), reason="no /proc/kallsyms")
def test_a_file_whose_size_is_unknown_is_read_on_to_its_end() -> None:
    """A procfs file's size reads 0 (a large host's /proc/cpuinfo): read on in pieces, to its end
    or the limit; a file on disk is read whole into one buffer (the test above). Reads only."""
    with open("/proc/kallsyms", "rb") as fh:
        want = fh.read()
    assert os.stat("/proc/kallsyms").st_size == 0 and len(want) > 3 * 4096
    live = Host("/")
    assert live.read("/proc/kallsyms", limit=len(want) * 2) == want.decode("utf-8", errors="replace")
    with pytest.raises(HostIOError) as e:
        live.read("/proc/kallsyms", limit=len(want) // 2)
    assert e.value.errno == errno.EFBIG


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda p: None, "ENOENT"),
        (lambda p: p.mkdir(), "EISDIR"),
        (lambda p: (p.parent / "loop-b").symlink_to("loop-a") or p.symlink_to("loop-b"), "ELOOP"),
    ],
    ids=["missing", "directory", "symlink-loop"],
)
def test_unreadable_attribute_reasons(tmp_path: Path, setup: object, reason: str) -> None:
    (tmp_path / "sys").mkdir()
    target = tmp_path / "sys" / ("loop-a" if reason == "ELOOP" else "attr")
    setup(target)  # type: ignore[operator]
    host = Host(str(tmp_path))
    attr = host.read_attr(f"/sys/{target.name}")
    assert attr.value is None and attr.reason == reason
    with pytest.raises(HostIOError) as e:
        host.read(f"/sys/{target.name}")
    assert e.value.errno_name == reason


# -- confinement ---------------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=40) | st.lists(st.sampled_from(["..", ".", "", "sys", "a b", "\x00", "~", "*", "-"]),
                                       max_size=6).map(lambda parts: "/" + "/".join(parts)))
def test_any_host_path_maps_under_the_root_or_is_refused(attr_root: Path, host_path: str) -> None:
    host = Host(str(attr_root))
    try:
        real = host.path(host_path)
    except ConfinementError as e:
        assert e.exit_code == ExitCode.USAGE
        return
    root = os.path.realpath(attr_root)
    assert real == root or real.startswith(root + "/")
    assert ".." not in real.split("/")


@pytest.fixture
def escape(tmp_path: Path) -> tuple[Path, Path]:
    """A root with symlinks leaving it, and an outside directory holding a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("42\n")
    root = tmp_path / "root"
    (root / "sys" / "class").mkdir(parents=True)
    (root / "sys" / "abs").symlink_to(outside / "secret")
    (root / "sys" / "rel").symlink_to("../../outside/secret")
    (root / "sys" / "class" / "dir").symlink_to("../../../outside")
    (root / "sys" / "inside").symlink_to("class")
    (root / "var").symlink_to(outside)
    (root / "run").symlink_to("../outside")
    return root, outside


@pytest.mark.parametrize("path", ["/sys/abs", "/sys/rel", "/sys/class/dir/secret", "/var/secret"])
def test_symlinks_escaping_the_root_are_refused(escape: tuple[Path, Path], path: str) -> None:
    root, outside = escape
    host = Host(str(root))
    assert host.read_attr(path).reason == f"resolves outside the host root (to {outside / 'secret'})"
    assert host.read_int(path) is None
    assert host.exists(path)  # it is there, so its device keeps a row saying why it is unknown
    assert host.escapes_root(path)
    assert path in host.escapes
    with pytest.raises(HostIOError) as e:
        host.write(path, "7\n")
    assert e.value.errno == errno.EXDEV  # not EACCES: no backend may call it a privilege problem
    assert "resolves outside the host root" in e.value.strerror
    with pytest.raises(ConfinementError):
        host.realpath(path)
    assert (outside / "secret").read_text() == "42\n"


def test_escaping_directories_list_as_empty(escape: tuple[Path, Path]) -> None:
    root, _ = escape
    host = Host(str(root))
    assert host.listdir("/sys/class/dir") == []
    assert not host.is_dir("/var")
    assert host.listdir("/sys/inside") == ["dir"]
    assert host.realpath("/sys/inside") == "/sys/class"


def test_makedirs_and_write_atomic_create_nothing_outside(escape: tuple[Path, Path]) -> None:
    """``<root>/var`` and ``<root>/run`` are symlinks out of the root: the journal and the lock
    directories must be refused before anything is created outside."""
    root, outside = escape
    host = Host(str(root))
    with pytest.raises(ConfinementError):
        host.makedirs("/var/lib/joulectl")
    with pytest.raises(ConfinementError):
        host.write_atomic("/var/lib/joulectl/state.json", "{}\n")
    with pytest.raises(ConfinementError):
        host.makedirs("/run/joulectl")
    assert sorted(os.listdir(outside)) == ["secret"]


def test_write_never_follows_a_symlink_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "real").write_text("1\n")
    (tmp_path / "sys" / "link").symlink_to("real")
    host = Host(str(tmp_path))
    host.write("/sys/link", "2\n")  # resolved inside the root first, then opened without following
    assert (tmp_path / "sys" / "real").read_text() == "2\n"
    assert (tmp_path / "sys" / "link").is_symlink()


def test_write_does_not_create_missing_attributes(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    host = Host(str(tmp_path))
    with pytest.raises(HostIOError) as e:
        host.write("/sys/power1_cap", "1\n")
    assert e.value.errno == errno.ENOENT
    assert not (tmp_path / "sys" / "power1_cap").exists()


# -- tools ----------------------------------------------------------------------------------------

ARGV_DUMPER = "#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n"


@pytest.fixture(scope="module")
def tool_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tool-root")
    (root / "bin").mkdir()
    tool = root / "bin" / "argv-dump"
    tool.write_text(ARGV_DUMPER)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return root


SHELL_METACHARS = ["; touch pwned", "$(touch pwned)", "`touch pwned`", "| cat", "&& id", "*", "~", "$HOME",
                   "'", '"', "\\", "\n", "-i", "--", " ", ""]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(SHELL_METACHARS) | st.text(alphabet=st.characters(
    codec="utf-8", exclude_characters="\x00"), max_size=10), max_size=5))
def test_tool_arguments_are_passed_verbatim_never_through_a_shell(tool_root: Path, args: list[str]) -> None:
    host = Host(str(tool_root))
    result = host.run(["argv-dump", *args], timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == args
    assert not (tool_root / "pwned").exists() and not Path("pwned").exists()
    assert host.tool_calls == [("argv-dump", *args)]


@pytest.mark.parametrize("bad", ["a\x00b", "\x00"])
def test_nul_in_a_tool_argument_is_refused(tool_root: Path, bad: str) -> None:
    host = Host(str(tool_root))
    with pytest.raises(ValueError, match="invalid tool argument"):
        host.run(["argv-dump", bad])
    assert host.tool_calls == []


@pytest.mark.parametrize("tool", ["../bin/argv-dump", "/bin/sh", "sh", "", "bin/argv-dump", "argv-dump\x00"])
def test_tools_come_only_from_the_roots_bin(tool_root: Path, tool: str) -> None:
    host = Host(str(tool_root))
    if "\x00" in tool:
        with pytest.raises(ValueError):
            host.run([tool])
        return
    with pytest.raises(ToolNotFound):
        host.run([tool, "x"])
    assert host.tool_calls == []


@FUZZ
@given(st.lists(st.sampled_from(["a", "b", ".", "", "c d"]), min_size=1, max_size=5).map(lambda p: "/" + "/".join(p)))
def test_makedirs_of_odd_but_confined_paths(attr_root: Path, host_path: str) -> None:
    host = Host(str(attr_root))
    host.makedirs(host_path)
    assert host.is_dir(host_path)


@pytest.mark.parametrize("size", [0, 100, 4095, 4096, 4097, 70_000])
def test_read_head_is_the_start_of_any_file(tmp_path: Path, size: int) -> None:
    (tmp_path / "proc").mkdir()
    data = bytes(ord("a") + i % 26 for i in range(size))
    (tmp_path / "proc" / "cpuinfo").write_bytes(data)
    host = Host(str(tmp_path))
    for head in (1, 4096, 16384, 1 << 20):
        assert host.read_head("/proc/cpuinfo", head) == data[:head].decode()
    assert host.read_head("/proc/missing", 10) == ""
    fifo = tmp_path / "proc" / "fifo"
    os.mkfifo(fifo)
    assert host.read_head("/proc/fifo", 10) == ""  # never blocks, never a FIFO's bytes


@pytest.mark.skipif(not Path("/proc/kallsyms").is_file(), reason="no /proc/kallsyms")
def test_read_head_of_a_procfs_file_reads_past_its_first_page() -> None:
    with open("/proc/kallsyms", "rb") as fh:
        want = fh.read(20_000)
    assert Host("/").read_head("/proc/kallsyms", 20_000) == want.decode("utf-8", errors="replace")


def _link_tree(top: Path, rng: random.Random) -> tuple[Path, list[str]]:
    """A root of nested directories and ten symlinks of every shape: leading ``..`` (sysfs's),
    a ``..`` after a name, absolute, ``.`` components, chains, loops, targets missing or outside."""
    root = top / "root"
    (top / "outside" / "x").mkdir(parents=True)
    dirs = [""]
    for i in range(4):
        d = os.path.join(rng.choice(dirs), f"d{i}")
        (root / d).mkdir(parents=True, exist_ok=True)
        dirs.append(d)
    links: list[str] = []
    for i in range(10):
        d = rng.choice(dirs)
        depth = d.count("/") + (1 if d else 0)
        kind = rng.random()
        if kind < 0.4:
            target = "../" * rng.randint(0, depth + 1) + rng.choice([*dirs, *(f"l{j}" for j in range(10)), "missing"])
        elif kind < 0.55:
            target = f"{rng.choice([*dirs, *(f'l{j}' for j in range(10))])}/../{rng.choice(dirs)}"  # (a link's ..)
        elif kind < 0.65:
            target = rng.choice(["/tmp", f"{root}/d0", "/nonexistent"])
        elif kind < 0.9:  # a sibling link: chains, and loops of two or three
            target = rng.choice([f"l{rng.randint(0, 9)}", f"./l{rng.randint(0, 9)}/./"])
        else:
            target = "../" * (depth + 2) + "outside/x"
        link = root / d / f"l{i}"
        if not os.path.lexists(link):
            link.symlink_to(target or ".")
            links.append(os.path.join(d, f"l{i}"))
    return root, links


@pytest.mark.parametrize("chunk", range(4))
def test_paths_resolve_as_realpath_resolves_them(tmp_path: Path, chunk: int) -> None:
    # The Host resolves a link's target from its cache of resolved directories (not realpath's
    # stat of every component from /): the same answer as realpath for every shape of link, in
    # any order of lookups, and the same refusal where the answer is outside the root. 400 trees.
    # Through a symlink loop realpath gives up and returns the rest of the path unresolved, an
    # answer that depends on where the loop was entered (and may hide a link out of the root
    # behind it): there the Host's answer is only held to be inside the root or refused.
    for seed in range(chunk * 100, chunk * 100 + 100):
        rng = random.Random(seed)
        root, links = _link_tree(tmp_path / str(seed), rng)
        real_root = os.path.realpath(root)
        paths = [*links, *(f"{n}/leaf" for n in links), *(f"{n}/l{rng.randint(0, 9)}/x" for n in links)]
        rng.shuffle(paths)
        host = Host(str(root))
        for path in paths:
            host_path = "/" + path.lstrip("/")
            want = os.path.realpath(real_root + host_path)
            try:
                os.path.realpath(real_root + host_path, strict=True)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    try:
                        assert host.realpath(host_path).startswith("/")
                    except ConfinementError:
                        pass
                    continue
            if want == real_root or want.startswith(real_root + os.sep):
                assert host.realpath(host_path) == (want[len(real_root):] or "/"), (seed, host_path, want)
            else:
                with pytest.raises(ConfinementError):
                    host.realpath(host_path)
