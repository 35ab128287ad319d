"""cpuinfo_summary (discover's fast read of /proc/cpuinfo) takes what parse_cpuinfo gives: the first
processor block, the thread count, the sockets and the (socket, core) pairs, on a real capture, on
the emulator's 384-thread EPYC, and on texts off the kernel's layout (blank-looking lines, keys
after blanks, carriage returns, repeated keys, look-alike keys, non-ASCII) that take the slow path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulectl.backends.cpu import cpuinfo_summary, parse_cpuinfo

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "cpu-xeon-x7550-4s-legacy" / "proc" / "cpuinfo"


def _slow(text: str) -> tuple[dict[str, str], int, set[str], set[tuple[str | None, str]]]:
    blocks = parse_cpuinfo(text)
    return (blocks[0] if blocks else {}, len(blocks), {b["physical id"] for b in blocks if "physical id" in b},
            {(b.get("physical id"), b["core id"]) for b in blocks if "core id" in b})


def test_a_real_capture_reads_alike() -> None:
    text = REAL.read_text()
    first, threads, sockets, cores = cpuinfo_summary(text)
    assert (first["model name"], threads, sorted(sockets), len(cores)) == (
        "Intel(R) Xeon(R) CPU           X7550  @ 2.00GHz", 64, ["0", "1", "2", "3"], 32)
    assert cpuinfo_summary(text) == cpuinfo_summary(text.encode()) == _slow(text)


def test_the_emulated_384_thread_epyc_reads_alike() -> None:
    from joulectl.sim.cpu_tree import cpuinfo as _cpuinfo
    from joulectl.sim.profiles import ProfileSet

    text = _cpuinfo(ProfileSet().get("amd-epyc-2s-energy-only").cpu)
    first, threads, sockets, cores = cpuinfo_summary(text)
    assert (first["vendor_id"], threads, sorted(sockets), len(cores)) == ("AuthenticAMD", 384, ["0", "1"], 192)
    assert cpuinfo_summary(text) == cpuinfo_summary(text.encode()) == _slow(text)


B0 = "processor\t: 0\nvendor_id\t: GenuineIntel\nphysical id\t: 0\ncore id\t\t: 0\n"
B1 = "processor\t: 1\nvendor_id\t: GenuineIntel\nphysical id\t: 1\ncore id\t\t: 0\n"


@pytest.mark.parametrize("text", [
    "",
    "\n\n",
    B0 + "\n" + B1,
    B0 + "\n\n\n" + B1 + "\n",
    B0 + " \n" + B1,  # a line of blanks ends a block too
    B0 + "\n" + B1.replace("core id", "  core id"),  # a key after blanks
    B0 + "\n" + B1.replace("\n", "\r\n"),
    B0 + "\n" + B1 + "physical id\t: 7\n",  # a repeated key: the last one counts
    B0 + "\n" + B1.replace("physical id", "physical idx"),  # a look-alike key
    B0 + "\n" + "vendor_id : x\nphysical id : 3\n",  # a block without processor
    B0 + "\n" + B1.replace("core id\t\t: 0", "core id"),  # a key without a colon
    B0 + "\n" + B1.replace("core id\t\t: 0", "core id:"),  # an empty value
    B0 + "\n" + B1.replace("GenuineIntel", "Genuine\u00a0Intel") + "\u00a0physical id : 9\n",
    B0 + "\n" + "\tprocessor : 2\nphysical id : 2\n",
    B0 + "\n" + B1 + "\x0bphysical id: 5\n",
    "vendor_id : x\n\n" + B1 + "\n" + B0,  # the first processor block is not the first block
    (B0 + "\n" + B1).rstrip("\n"),  # no newline at the end
    "\n" + B0 + "\n" + B1.replace("processor\t: 1", "processor\t: 1  \t"),
])
def test_texts_off_the_kernel_layout_read_alike(text: str) -> None:
    assert cpuinfo_summary(text) == cpuinfo_summary(text.encode()) == _slow(text)


@pytest.mark.parametrize(("text", "expect"), [
    # a carriage return ends a line as str.splitlines says (ASCII CR, U+000D): three keys, not one
    # "processor" whose value runs on (kills backends/cpu.py:100 `not any(odd space)` -> `any`: the
    # fast path would read the line up to the next newline only)
    ("processor\t: 0\rphysical id\t: 3\rcore id\t\t: 1\n",
     ({"processor": "0", "physical id": "3", "core id": "1"}, 1, {"3"}, {("3", "1")})),
    ("processor\t: 0\x0cphysical id\t: 2\n\nprocessor\t: 1\x0cphysical id\t: 2\n",  # form feed, U+000C
     ({"processor": "0", "physical id": "2"}, 2, {"2"}, set())),
    # every one of the seven odd line breaks at once (CR, VT, FF, FS, GS, RS, US): still read line by
    # line (kills backends/cpu.py:101 `c in text` -> `not in`, which took the fast path for a text
    # holding all seven)
    ("processor\t: 0\rphysical id\t: 4\x0bcore id\t\t: 2\x0cflags\t: fpu\x1c\x1d\x1e\x1f\n",
     ({"processor": "0", "physical id": "4", "core id": "2", "flags": "fpu"}, 1, {"4"}, {("4", "2")})),
])
def test_odd_line_breaks_split_lines_written_out(text: str, expect: object) -> None:
    assert cpuinfo_summary(text) == expect


_LINE = st.sampled_from(["processor\t: 0", "processor\t: 1", "physical id\t: 0", "physical id : 1", "core id\t\t: 3",
                         "core id", "vendor_id\t: AuthenticAMD", "flags\t\t: fpu hypervisor", "", " ", "\t", "x: y",
                         "processor:", "physical idx : 2", " processor : 9"])


@settings(max_examples=1500, deadline=None)
@given(st.lists(_LINE, max_size=12), st.sampled_from(["", "\n", "\n\n", " "]), st.sampled_from(["", "\n", " "]))
def test_the_lines_are_what_the_pattern_finds_in_the_padded_text(lines: list[str], end: str, start: str) -> None:
    # _topology_lines reads the text in place (no copies of a 650 KB text): the same matches as
    # the pattern on the text with a newline before and two after, as before; the summary is
    # parse_cpuinfo's, stripped or not (discover hands it the file as read).
    from joulectl.backends import cpu

    text = start + "\n".join(lines) + end
    import re

    assert cpu._topology_lines(text) == re.findall(cpu._TOPOLOGY_LINE, "\n" + text + "\n\n")
    padded = ("\n" + text + "\n\n").encode()
    assert cpu._topology_lines(text.encode()) == re.findall(cpu._TOPOLOGY_LINE.encode(), padded)
    assert cpuinfo_summary(text) == cpuinfo_summary(text.strip()) == cpuinfo_summary(text.encode()) == _slow(text)
