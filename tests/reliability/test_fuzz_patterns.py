"""Names and values the backends read with string functions where patterns once read them (each
compiled pattern was part of every discover's start-up): powercap zone ids, package zone names,
cpufreq policy names, nvidia-smi numbers, amdgpu DPM levels, architecture keys. The functions
answer what the patterns answered, for any text (Unicode blanks and digits included)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl.backends import amd, cpu, nvidia, nvidia_clocks

FUZZ = settings(max_examples=examples(1500), deadline=None)
ZONE_ID = r"^(?P<type>[a-z0-9_-]+):(?P<ids>[0-9a-f]+(?::[0-9a-f]+)*)$"
PACKAGE = r"^package-(\d+)"
POLICY = r"^policy(\d+)$"
#: Unicode digits (Arabic-Indic, fullwidth), a superscript (a digit, not a decimal), newlines
ODD = "\u0663\uff17\u00b2\n"
zone_names = (st.text(alphabet="intel-rap:0123456789abcdefgxyzA_\n" + ODD, max_size=16)
              | st.builds(lambda t, ids, end: f"{t}:{':'.join(ids)}{end}",
                          st.sampled_from(["intel-rapl", "intel-rapl-mmio", "amd_rapl", "x", "Intel", ""]),
                          st.lists(st.sampled_from(["0", "1", "a", "f", "10", "g", "", "A"]), min_size=1, max_size=3),
                          st.sampled_from(["", "\n", "\n\n", ":", " "])))
package_names = st.builds(lambda pre, digits, end: pre + digits + end,
                          st.sampled_from(["package-", "package", "Package-", "package--", "xpackage-", ""]),
                          st.text(alphabet="0123456789" + ODD, max_size=5), st.sampled_from(["", "\n", "-die-0", "a"]))
policy_names = st.builds(lambda pre, digits, end: pre + digits + end,
                         st.sampled_from(["policy", "Policy", "polic", "policyy", "xpolicy", ""]),
                         st.text(alphabet="0123456789" + ODD, max_size=5),
                         st.sampled_from(["", "\n", "\n\n", "x", " "]))


@FUZZ
@given(zone_names)
def test_zone_ids_read_as_the_pattern_reads_them(name: str) -> None:
    m = re.match(ZONE_ID, name)
    assert cpu._zone_id(name) == (None if m is None else (m.group("type"), m.group("ids")))


@FUZZ
@given(package_names | st.text(max_size=12))
def test_package_numbers_read_as_the_pattern_reads_them(name: str) -> None:
    m = re.match(PACKAGE, name)
    assert cpu._package_number(name) == (None if m is None else int(m.group(1)))


@FUZZ
@given(policy_names | st.text(max_size=12))
def test_policy_names_read_as_the_pattern_reads_them(name: str) -> None:
    assert cpu._is_policy(name) == (re.match(POLICY, name) is not None)


#: Unicode blanks (\s: no-break space, em space, the file separator...) and digits
BLANKS = " \t\n\x0b\x0c\r\x1c\u00a0\u2003\u3000"
numbers = (st.text(alphabet="0123456789.+-eEWMHzN/A[]" + BLANKS + ODD, max_size=14)
           | st.builds(lambda a, n, b, u, c: a + n + b + u + c, st.sampled_from(["", " ", "\u00a0", "\n"]),
                       st.sampled_from(["700.00", "-1", "+3", "1.", ".5", "1.5.2", "12\u0663", "\uff17.5", "1e3"]),
                       st.sampled_from(["", " ", "\t"]), st.sampled_from(["W", "MHz", "", "W2", "µW", "[N/A]"]),
                       st.sampled_from(["", " ", "\n", "\n\n", " x"])))


@FUZZ
@given(numbers | st.text(max_size=12))
def test_nvidia_numbers_read_as_the_pattern_reads_them(value: str) -> None:
    m = re.match(nvidia._NUMBER, value)
    assert nvidia._number_text(value) == (None if m is None else m.group(1))


levels = (st.text(alphabet="0123456789:MmHhZz* x" + BLANKS + ODD, max_size=16)
          | st.builds(lambda a, n, b, c, d, mhz, e, f, g: a + n + b + ":" + c + d + mhz + e + f + g,
                      st.sampled_from(["", " ", "\u00a0"]), st.sampled_from(["0", "12", "\u0663", ""]),
                      st.sampled_from(["", " "]), st.sampled_from(["", " ", "\t"]),
                      st.sampled_from(["500", "1700", "\uff17", "", "x"]),
                      st.sampled_from(["Mhz", "MHz", "mhz", "MHZ", "Mh", "Hz", "Mhzx"]),
                      st.sampled_from(["", " ", "  "]),
                      st.sampled_from(["*", "", "x*", " *"]), st.sampled_from(["", " ", "trailing"])))


@FUZZ
@given(levels | st.text(max_size=12))
def test_dpm_levels_read_as_the_pattern_reads_them(line: str) -> None:
    m = re.match(amd._LEVEL, line)
    assert amd._dpm_level(line) == (None if m is None else (int(m.group(2)), bool(m.group(3))))


@FUZZ
@given(st.text(alphabet="ab- _" + BLANKS, max_size=12) | st.text(max_size=12))
def test_architecture_keys_read_as_the_pattern_makes_them(text: str) -> None:
    assert nvidia_clocks._underscored(text) == re.sub(r"[\s\-]+", "_", text)
