"""``discover`` on each builtin profile's rendered node: the expected report written out.

The values are the profiles' own facts as their YAML states them with a source (the Xeon Gold
6530's 32 cores per socket and 270 W PL1, the EPYC 9654's 96 cores, the H100's 200-700 W and
L40S's 100-350 W from their boards, the MI300X's 750 W, the W7900's 241 W package limit, the
Flex 170's 150 W rated_max), and what the SPEC makes of them (an MI250X's secondary dies hold no
limit: 8 GPUs, 4 power domains; amdgpu's 0 minimum is unknown, so no ``minWatts``; a locked PL1
leaves an EPYC without CPU control). They are not computed by ``sim.k8s.node_hardware``, which
reads the same catalog as discover.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

XEON_6530 = {"sockets": 2, "totalCores": 64, "coresPerSocket": 32, "rawModel": "INTEL(R) XEON(R) GOLD 6530",
             "vendor": "GenuineIntel", "driverFamily": "intel_pstate", "governors": ["performance", "powersave"],
             "zones": ["dram", "dram", "package", "package", "psys"], "controlAvailable": True,
             "maxWattsPerSocket": 270}
EPYC_9654 = {"sockets": 2, "totalCores": 192, "coresPerSocket": 96, "rawModel": "AMD EPYC 9654 96-Core Processor",
             "vendor": "AuthenticAMD", "driverFamily": "amd-pstate-epp", "governors": ["performance", "powersave"],
             "zones": ["core", "core", "package", "package"], "controlAvailable": False, "maxWattsPerSocket": None}
NO_GPU = {"count": 0, "powerDomains": 0, "vendor": None, "model": None, "capRangePerGpu": None,
          "currentCapWatts": None, "enforcedCapWatts": None}


def _gpu(count: int, domains: int, vendor: str, model: str, cap_range: dict[str, int], cap: int,
         enforced: int | None = None) -> dict[str, Any]:
    return {"count": count, "powerDomains": domains, "vendor": vendor, "model": model, "capRangePerGpu": cap_range,
            "currentCapWatts": cap, "enforcedCapWatts": enforced}


EXPECTED: dict[str, tuple[bool, dict[str, Any], dict[str, Any]]] = {
    "amd-epyc-2s-energy-only": (False, EPYC_9654, NO_GPU),
    "amd-instinct-mi250x-4gpu": (False, EPYC_9654, _gpu(8, 4, "amd", "AMD_INSTINCT_MI250X",
                                                        {"maxWatts": 560, "defaultWatts": 560}, 560)),
    "amd-instinct-mi300x-8gpu": (False, EPYC_9654, _gpu(8, 8, "amd", "AMD_INSTINCT_MI300X",
                                                        {"maxWatts": 750, "defaultWatts": 750}, 750)),
    "amd-radeon-pro-w7900": (False, XEON_6530, _gpu(1, 1, "amd", "AMD_RADEON_PRO_W7900",
                                                    {"minWatts": 241, "maxWatts": 241, "defaultWatts": 241}, 241)),
    "intel-flex-170-4gpu": (False, XEON_6530, _gpu(4, 4, "intel", "INTEL_DATA_CENTER_GPU_FLEX_170",
                                                   {"maxWatts": 150, "defaultWatts": 150}, 150)),
    "intel-xeon-2s-rapl": (False, XEON_6530, NO_GPU),
    "intel-xeon6-2s-tpmi": (False, {"sockets": 2, "totalCores": 144, "coresPerSocket": 72,
                                    "rawModel": "Intel(R) Xeon(R) 6960P", "vendor": "GenuineIntel",
                                    "driverFamily": "intel_pstate", "governors": ["performance", "powersave"],
                                    "zones": ["package", "package"], "controlAvailable": True,
                                    "maxWattsPerSocket": 500}, NO_GPU),
    "nvidia-h100-sxm-8gpu": (False, XEON_6530, _gpu(8, 8, "nvidia", "NVIDIA_H100_SXM",
                                                    {"minWatts": 200, "maxWatts": 700, "defaultWatts": 700}, 700, 700)),
    "nvidia-l40s-4gpu": (False, XEON_6530, _gpu(4, 4, "nvidia", "NVIDIA_L40S",
                                                {"minWatts": 100, "maxWatts": 350, "defaultWatts": 350}, 350, 350)),
    "vm-no-powercap": (True, {"sockets": 1, "totalCores": 8, "coresPerSocket": 8,
                              "rawModel": "Intel Xeon Processor (Icelake)", "vendor": "GenuineIntel",
                              "driverFamily": None, "governors": [], "zones": [], "controlAvailable": False,
                              "maxWattsPerSocket": None}, NO_GPU),
}


def test_the_table_covers_every_builtin_profile() -> None:
    from joulectl.sim.profiles import builtin_profile_names

    assert sorted(EXPECTED) == sorted(builtin_profile_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_discover_on_a_rendered_profile(cli: Callable[..., Any], all_trees: dict[str, Path], name: str) -> None:
    r = cli("--root", str(all_trees[name]), "discover", "-o", "json")
    assert r.exit_code == 0, r.stderr
    st = json.loads(r.stdout)["status"]
    c, g = st["cpu"], st["gpu"]
    cpu = {k: c.get(k) for k in ("sockets", "totalCores", "coresPerSocket", "rawModel", "vendor", "driverFamily")}
    cpu["governors"] = (c.get("governor") or {}).get("availableGovernors")
    cpu["zones"] = sorted(z["kind"] for z in c.get("zones") or [])
    cpu["controlAvailable"] = c.get("controlAvailable")
    cpu["maxWattsPerSocket"] = (c.get("capRange") or {}).get("maxWattsPerSocket")
    gpu = {k: g.get(k) for k in NO_GPU}
    assert (st["host"]["virtual"], cpu, gpu) == EXPECTED[name]
