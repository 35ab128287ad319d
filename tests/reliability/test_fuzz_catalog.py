"""Catalog normalisation and lookup with arbitrary model names (sysfs product names, node labels,
nvidia-smi output): a catalog entry or None, never an exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_support import examples

from joulectl import catalog

FUZZ = settings(max_examples=examples(2000), deadline=None)
CAT = catalog.load()
NAMES = sorted({*CAT.gpus, *CAT.cpus, *(a for g in CAT.gpus.values() for a in g.aliases)})
model_names = (
    st.text(max_size=40)
    | st.builds(lambda n, pre, suf: pre + n + suf, st.sampled_from(NAMES),
                st.sampled_from(["", "NVIDIA ", " ", "AMD ", "Intel(R) "]),
                st.sampled_from(["", "-MIG-1g.10gb", "-MIG-INVALID", "-SHARED", "-SHARED-MIG-3g.40gb", "(TM)",
                                 " ", "™"]))
)


@FUZZ
@given(model_names)
def test_normalize_and_lookup_never_raise(name: str) -> None:
    norm = catalog.normalize(name)
    assert catalog.normalize(norm) == norm
    assert norm == norm.strip() and "  " not in norm
    stripped = catalog.strip_gfd_suffix(name)
    assert catalog.strip_gfd_suffix(stripped) == stripped
    gpu = CAT.gpu(name)
    assert gpu is None or gpu.key in CAT.gpus
    cpu = CAT.cpu(name)
    assert cpu is None or cpu.key in CAT.cpus
    assert catalog.gpu_family(name or None).startswith("gpu:")


@FUZZ
@given(st.sampled_from(sorted(CAT.gpus)), st.sampled_from(["", "-MIG-1g.10gb", "-MIG-INVALID", "-SHARED"]))
def test_gfd_suffixes_never_change_the_entry(key: str, suffix: str) -> None:
    entry = CAT.gpus[key]
    for alias in (key, *entry.aliases):
        found = CAT.gpu(alias + suffix)
        assert found is not None
        assert CAT.gpu(alias) == found
        assert found.min_w <= found.max_board_power_w


_GFD_PATTERN = r"(?:-MIG-[^\s]*|-SHARED)+$"
suffixed = st.builds(lambda n, suf, case: getattr(n + suf, case)(), model_names,
                     st.sampled_from(["", "-MIG-1g.10gb", "-mig-2g.20gb-shared", "-ſHARED", "-MıG-1g.5gb", "-SHARED "]),
                     st.sampled_from(["lower", "upper", "title", "strip"]))


@FUZZ
@given(suffixed | st.text(alphabet="-migMIGshardSHARDſıİK .0123456789", max_size=24))
def test_strip_gfd_suffix_is_the_case_blind_pattern(name: str) -> None:
    # An ASCII name without "-mig-" or "-shared" is returned without the pattern (start-up: it is
    # not compiled); every name, ASCII or not (a long s, a dotless i), is what the pattern makes.
    import re

    assert catalog.strip_gfd_suffix(name) == re.sub(_GFD_PATTERN, "", name.strip(), flags=re.IGNORECASE)


def _normalize_by_patterns(name: str) -> str:
    """The catalog's matching form as three patterns made it before the start-up work (issue 20)."""
    import re

    text = re.sub(r"\([rR]\)|\([tT][mM]\)|®|™", "", name.lower())
    text = re.sub(r"[()\-_/,]+", " ", text)
    return re.sub(r"\s+", " ", text).strip()


@FUZZ
@given(model_names | st.text(alphabet="()-_/,rRtTmM®™ \t\n\x0b\x1c\u00a0\u2003\u3000aZ0\x00", max_size=24))
def test_normalize_is_what_the_patterns_made(name: str) -> None:
    # separators, marks and every kind of white space (Unicode's too), a NUL: the same form as before
    assert catalog.normalize(name) == _normalize_by_patterns(name)
    # a removal that makes a new mark of its neighbours ("(r(tm))" -> "(r)"), which the pattern's
    # single scan leaves: the marks are dropped as they stood
    for tricky in ("((tm)r)", "(t(r)m)", "(r(tm))", "((r)tm)", "(®r)", "(t™m)", "(r\x00(tm))",
                   "Intel(R) Xeon(R)\u00a0Gold", "NVIDIA  H100--SXM5_80GB"):
        assert catalog.normalize(tricky) == _normalize_by_patterns(tricky)
