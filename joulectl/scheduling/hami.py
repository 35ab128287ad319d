"""HAMi's card-level fit, as its scheduler does it (seed gpu-type-and-uuid-scheduling.txt, HAMi v2.4
``pkg/scheduler/score.go`` and ``pkg/scheduler/policy``).

A node's cards come from its ``hami.io/node-nvidia-register`` annotation (``UUID,split count,memory
MiB,cores,type,numa,health:`` per card; unhealthy cards are left out). Cards already used by pods
running on the node come from their ``hami.io/vgpu-devices-allocated`` annotation
(``UUID,NVIDIA,mem,cores:`` per card, ``;`` between containers), or, without it, by placing their
requests as HAMi would.

Per container of the pod, in order (HAMi's ``fitInDevices``): every card is scored, the cards are
sorted by the GPU policy (``hami.io/gpu-scheduler-policy``: ``binpack`` fills the most used card
first, anything else is ``spread``, HAMi's default), then :func:`fit_in_certain_device` walks them
from the last to the first exactly as ``fitInCertainDevice``:

- type (``nvidia.com/use-gputype``, ``nouse-gputype``: upper-cased substrings) and UUID
  (``use-gpuuuid``, ``nouse-gpuuuid``: exact) annotations;
- the card's split count: a card holds at most that many vGPUs;
- ``nvidia.com/gpucores`` above 100 is clamped to 100 (HAMi logs "core limit can't exceed 100");
- memory: ``nvidia.com/gpumem`` MiB per vGPU, else ``nvidia.com/gpumem-percentage`` of the card,
  else (neither given) 100 % of the card;
- cores free; 100 cores takes a card exclusively (no vGPU on it yet); a request of 0 cores never
  goes to a card whose cores are all used.

The container's usage is added to its cards before the next container is fitted. The node score
(``NodeScore.ComputeScore``, usage before the pod) orders the fitting nodes by the node policy
(``hami.io/node-scheduler-policy``: ``binpack``, HAMi's default, prefers the most used node,
anything else ``spread``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from joulectl.k8s import HamiGpu, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
MEM_RESOURCE = "nvidia.com/gpumem"
MEM_PCT_RESOURCE = "nvidia.com/gpumem-percentage"
CORES_RESOURCE = "nvidia.com/gpucores"
HAMI_RESOURCES = (GPU_RESOURCE, MEM_RESOURCE, MEM_PCT_RESOURCE, CORES_RESOURCE)
#: resources only HAMi reads: a pod asking for one needs a HAMi node
HAMI_ONLY_RESOURCES = (MEM_RESOURCE, MEM_PCT_RESOURCE, CORES_RESOURCE)
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
NUMA_BIND_ANNOTATION = "nvidia.com/numa-bind"
BINPACK, SPREAD = "binpack", "spread"
#: HAMi's defaults (``--node-scheduler-policy``, ``--gpu-scheduler-policy``)
DEFAULT_NODE_POLICY, DEFAULT_GPU_POLICY = BINPACK, SPREAD
WEIGHT = 10.0
#: ``MemPercentagereq`` when the container gives no ``gpumem-percentage``
NO_PERCENTAGE = 101


@dataclass
class Card:
    """One card of a node and what is used of it (HAMi's ``DeviceUsage``)."""

    uuid: str
    index: int
    type: str
    numa: int
    count: int  # split count: vGPUs the card holds
    total_mem: int  # MiB
    total_cores: int
    used: int = 0
    used_mem: int = 0
    used_cores: int = 0
    score: float = 0.0

    @classmethod
    def from_register(cls, gpu: HamiGpu, index: int) -> Card:
        return cls(gpu.uuid, index, gpu.type, gpu.numa, gpu.count, gpu.memory_mib, gpu.cores)

    @property
    def free_mem(self) -> int:
        return self.total_mem - self.used_mem

    @property
    def free_cores(self) -> int:
        return self.total_cores - self.used_cores


@dataclass(frozen=True)
class ContainerRequest:
    """HAMi's ``ContainerDeviceRequest`` of one container (NVIDIA)."""

    nums: int
    mem: int = 0  # MiB per vGPU
    mem_pct: int = NO_PERCENTAGE
    cores: int = 0
    #: gpumem or gpumem-percentage was given (else HAMi's default: the whole card's memory)
    mem_given: bool = True

    def mem_for(self, card: Card) -> int:
        """The memory this request takes on ``card`` (fitInCertainDevice's ``memreq``)."""
        if self.mem > 0:
            return self.mem
        if self.mem_pct != NO_PERCENTAGE:
            return card.total_mem * self.mem_pct // 100
        return 0

    def describe(self) -> str:
        parts = [f"{self.nums} vGPU" + ("s" if self.nums != 1 else "")]
        if self.mem > 0:
            parts.append(f"{self.mem} MiB each")
        elif self.mem_pct != NO_PERCENTAGE and self.mem_given:
            parts.append(f"{self.mem_pct}% of a card's memory each")
        if self.cores:
            parts.append(f"{min(self.cores, 100)}% cores")
        return ", ".join(parts)


def _int_quantity(value: Any) -> int | None:
    try:
        number = parse_quantity(value)
    except ValueError:
        return None
    return int(number)


def _first(resources: Mapping[str, Mapping[str, Any]], name: str) -> Any:
    """HAMi reads ``limits`` first, then ``requests``."""
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping):
            for key, value in values.items():
                if str(key).strip().lower() == name:
                    return value
    return None


def container_request(container: Mapping[str, Any]) -> tuple[ContainerRequest | None, list[str]]:
    """The container's HAMi request (None when it asks for no ``nvidia.com/gpu``) and notes.

    As HAMi's ``GenerateResourceRequests`` with its defaults (``defaultMem`` 0, ``defaultCores``
    0): no ``gpumem`` and no ``gpumem-percentage`` means 100 % of a card's memory.
    """
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None, []
    raw = _first(resources, GPU_RESOURCE)
    nums = _int_quantity(raw) if raw is not None else None
    if not nums:
        return None, []
    mem = _int_quantity(_first(resources, MEM_RESOURCE)) or 0
    raw_pct = _first(resources, MEM_PCT_RESOURCE)
    pct = _int_quantity(raw_pct) if raw_pct is not None else None
    mem_pct = NO_PERCENTAGE if pct is None else pct
    given = not (mem_pct == NO_PERCENTAGE and mem == 0)
    if not given:
        mem_pct = 100
    cores = _int_quantity(_first(resources, CORES_RESOURCE)) or 0
    notes = []
    if cores > 100:
        name = str(container.get("name") or "?")
        notes.append(f"container {name}: {CORES_RESOURCE} {cores} is above 100: clamped to 100, as HAMi does")
    return ContainerRequest(nums, mem, mem_pct, cores, given), notes


def pod_requests(spec: Mapping[str, Any]) -> tuple[tuple[ContainerRequest | None, ...], list[str]]:
    """One entry per container of ``spec.containers`` (HAMi reads no init containers)."""
    out: list[ContainerRequest | None] = []
    notes: list[str] = []
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        if not isinstance(c, Mapping):
            out.append(None)
            continue
        req, more = container_request(c)
        out.append(req)
        notes += more
    return tuple(out), notes


# -- pod annotations ---------------------------------------------------------------------------------


def _split(value: str | None) -> list[str] | None:
    return None if value is None else value.split(",")


@dataclass(frozen=True)
class Selection:
    """The pod's type and UUID annotations (split on ``,`` as HAMi does, without trimming)."""

    use_types: tuple[str, ...] | None = None
    nouse_types: tuple[str, ...] | None = None
    use_uuids: tuple[str, ...] | None = None
    nouse_uuids: tuple[str, ...] | None = None
    numa_bind: bool = False

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> Selection:
        def get(key: str) -> tuple[str, ...] | None:
            parts = _split(annotations.get(key))
            return None if parts is None else tuple(parts)

        return cls(
            get("nvidia.com/use-gputype"),
            get("nvidia.com/nouse-gputype"),
            get("nvidia.com/use-gpuuuid"),
            get("nvidia.com/nouse-gpuuuid"),
            annotations.get(NUMA_BIND_ANNOTATION, "").strip().lower() == "true",
        )

    def type_passes(self, card_type: str) -> bool:
        """checkGPUtype (after checkType's ``strings.Contains(d.Type, "NVIDIA")``)."""
        return "NVIDIA" in card_type and type_matches(card_type, self.use_types, self.nouse_types)

    def uuid_passes(self, uuid: str) -> bool:
        return uuid_matches(uuid, self.use_uuids, self.nouse_uuids)


def type_matches(card_type: str, use: Sequence[str] | None, nouse: Sequence[str] | None) -> bool:
    """HAMi's checkGPUtype: the upper-cased card type contains one of ``use-gputype`` (when
    given) and none of ``nouse-gputype``."""
    card = card_type.upper()
    if use is not None and not any(t.upper() in card for t in use):
        return False
    return not (nouse is not None and any(t.upper() in card for t in nouse))


def uuid_matches(uuid: str, use: Sequence[str] | None, nouse: Sequence[str] | None) -> bool:
    """HAMi's CheckUUID: exact; when ``use-gpuuuid`` is given, ``nouse-gpuuuid`` is not read."""
    if use is not None:
        return uuid in use
    if nouse is not None:
        return uuid not in nouse
    return True


def policy_of(annotations: Mapping[str, str], key: str, default: str) -> str:
    value = annotations.get(key)
    return default if value is None else value


# -- the fit -----------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    """Go's float32 division without a panic: x/0 is +Inf, 0/0 NaN (taken as 0 here to keep the
    sort total; a card with no memory or cores registered fits nothing that needs them anyway)."""
    if b:
        return a / b
    return float("inf") if a > 0 else 0.0


def compute_score(card: Card, req: ContainerRequest) -> None:
    """DeviceListsScore.ComputeScore (HAMi's integer ``MemPercentagereq / 100.0`` kept: 0 below 100)."""
    mem = card.total_mem * (req.mem_pct // 100) if req.mem_pct not in (0, NO_PERCENTAGE) else req.mem
    card.score = WEIGHT * (
        _ratio(req.nums + card.used, card.count)
        + _ratio(req.cores + card.used_cores, card.total_cores)
        + _ratio(mem + card.used_mem, card.total_mem)
    )


def sort_cards(cards: list[Card], gpu_policy: str) -> None:
    """DeviceUsageList's order (in place, stable as Go's insertion sort of up to 12 cards)."""
    if gpu_policy == BINPACK:
        cards.sort(key=lambda c: (-c.numa, c.score))
    else:
        cards.sort(key=lambda c: (c.numa, -c.score))


@dataclass(frozen=True)
class Placed:
    """A vGPU placed on a card."""

    uuid: str
    index: int
    mem: int
    cores: int


#: why a card did not take the request, in fitInCertainDevice's order
REJECTIONS = ("type", "uuid", "split", "memory", "cores", "exclusive", "full")


@dataclass
class Fit:
    ok: bool
    placed: list[Placed] = field(default_factory=list)
    #: first failed check per card UUID (cards that passed every check are not listed)
    rejected: dict[str, str] = field(default_factory=dict)


def fit_in_certain_device(cards: Sequence[Card], request: ContainerRequest, sel: Selection) -> Fit:
    """HAMi's fitInCertainDevice over ``cards`` in their sorted order, walked from the last."""
    orig = nums = request.nums
    cores = request.cores
    prevnuma = -1
    placed: list[Placed] = []
    rejected: dict[str, str] = {}
    for i in range(len(cards) - 1, -1, -1):
        card = cards[i]
        if not sel.type_passes(card.type):
            rejected[card.uuid] = "type"
            continue
        if sel.numa_bind and prevnuma != card.numa:
            nums = orig
            prevnuma = card.numa
            placed = []
        if not sel.uuid_passes(card.uuid):
            rejected[card.uuid] = "uuid"
            continue
        if card.count <= card.used:
            rejected[card.uuid] = "split"
            continue
        if cores > 100:
            cores = 100
        memreq = request.mem_for(card)
        if card.total_mem - card.used_mem < memreq:
            rejected[card.uuid] = "memory"
            continue
        if card.total_cores - card.used_cores < cores:
            rejected[card.uuid] = "cores"
            continue
        if card.total_cores == 100 and cores == 100 and card.used > 0:
            rejected[card.uuid] = "exclusive"
            continue
        if card.total_cores != 0 and card.used_cores == card.total_cores and cores == 0:
            rejected[card.uuid] = "full"
            continue
        if nums > 0:
            nums -= 1
            placed.append(Placed(card.uuid, card.index, memreq, cores))
        if nums == 0:
            return Fit(True, placed, rejected)
    return Fit(False, placed, rejected)


def add_usage(cards: Iterable[Card], placed: Iterable[Placed]) -> None:
    by_uuid = {c.uuid: c for c in cards}
    for p in placed:
        card = by_uuid.get(p.uuid)
        if card is not None:
            card.used += 1
            card.used_mem += p.mem
            card.used_cores += p.cores


@dataclass
class PodFit:
    ok: bool
    reason: str = ""
    placed: list[list[Placed]] = field(default_factory=list)


def fit_pod(
    cards: list[Card],
    requests: Sequence[ContainerRequest | None],
    sel: Selection,
    gpu_policy: str,
) -> PodFit:
    """Every container of the pod on ``cards`` (which are changed: sorted, usage added)."""
    out: list[list[Placed]] = []
    for req in requests:
        if req is None or req.nums == 0:
            out.append([])
            continue
        if req.nums > len(cards):
            return PodFit(False, f"asks for {req.describe()}, node has {_cards(len(cards))}", out)
        for card in cards:
            compute_score(card, req)
        sort_cards(cards, gpu_policy)
        fit = fit_in_certain_device(cards, req, sel)
        if not fit.ok:
            return PodFit(False, failure_reason(cards, req, sel, fit), out)
        add_usage(cards, fit.placed)
        out.append(fit.placed)
    return PodFit(True, "", out)


def node_score(cards: Sequence[Card]) -> float:
    """NodeScore.ComputeScore: 10 x (used/total + usedCores/totalCores + usedMem/totalMem)."""
    total = sum(c.count for c in cards)
    cores = sum(c.total_cores for c in cards)
    mem = sum(c.total_mem for c in cards)
    return WEIGHT * (
        _ratio(sum(c.used for c in cards), total)
        + _ratio(sum(c.used_cores for c in cards), cores)
        + _ratio(sum(c.used_mem for c in cards), mem)
    )


def _cards(n: int) -> str:
    return f"{n} card" + ("" if n == 1 else "s")


def _types(sel: Selection) -> str:
    parts = []
    if sel.use_types is not None:
        parts.append(f"of type {'|'.join(sel.use_types)}")
    if sel.nouse_types is not None:
        parts.append(f"not of type {'|'.join(sel.nouse_types)}")
    return " and ".join(parts) or "of type NVIDIA"


def _uuids(sel: Selection) -> str:
    if sel.use_uuids is not None:
        return f"use-gpuuuid {','.join(sel.use_uuids)}"
    return f"nouse-gpuuuid {','.join(sel.nouse_uuids or ())}"


def failure_reason(cards: Sequence[Card], req: ContainerRequest, sel: Selection, fit: Fit) -> str:
    """What failed, naming the card limit that did: "no card with 90000 MiB free (largest 46068 MiB)"."""
    by_reason: dict[str, list[Card]] = {r: [] for r in REJECTIONS}
    for card in cards:
        why = fit.rejected.get(card.uuid)
        if why:
            by_reason[why].append(card)
    want = f"{req.mem} MiB" if req.mem > 0 else f"{req.mem_pct}% of its memory"
    cores = min(req.cores, 100)  # HAMi clamps above 100
    # (the phrase for some cards, the phrase when it is every card)
    phrases: list[tuple[int, str, str]] = []
    for why in REJECTIONS:
        c = by_reason[why]
        if not c:
            continue
        if why == "type":
            kinds = ", ".join(sorted({x.type for x in c}))
            some, none = f"not {_types(sel)} ({kinds})", f"no card {_types(sel)} (the node's cards: {kinds})"
        elif why == "uuid":
            some, none = f"excluded by {_uuids(sel)}", f"no card allowed by {_uuids(sel)}"
        elif why == "split":
            some = f"with all {c[0].count} vGPU slots used"
            none = f"no card with a free vGPU slot (all {c[0].count} used)"
        elif why == "memory":
            largest = max(x.free_mem for x in c)
            some = f"without {want} free (largest {largest} MiB)"
            none = f"no card with {want} free (largest {largest} MiB)"
        elif why == "cores":
            most = max(x.free_cores for x in c)
            some = f"without {cores}% cores free (most {most}%)"
            none = f"no card with {cores}% cores free (most {most}%)"
        elif why == "exclusive":
            some, none = "in use (gpucores 100 takes a card alone)", "no unused card (gpucores 100 takes a card alone)"
        else:
            some, none = "with every core used", "no card with cores left (a request of 0 cores needs some)"
        phrases.append((len(c), some, none))
    fitting = len(cards) - len(fit.rejected)
    if fitting == 0 and len(phrases) == 1:
        return phrases[0][2]
    listing = "; ".join(f"{_cards(n)} {some}" for n, some, _ in phrases)
    if fitting == 0:
        return f"no card fits: {listing}"
    head = f"needs {req.nums} cards for {req.describe()}, {fitting} {'fits' if fitting == 1 else 'fit'}"
    return head + (f": {listing}" if listing else "")


# -- cards in use ------------------------------------------------------------------------------------


def decode_allocated(value: str) -> list[list[tuple[str, int, int]]]:
    """``hami.io/vgpu-devices-allocated``: per container, ``(uuid, mem, cores)`` per card.

    Records with fewer than four fields are skipped (HAMi rejects them)."""
    out: list[list[tuple[str, int, int]]] = []
    for ctr in value.split(";"):
        devs: list[tuple[str, int, int]] = []
        for dev in ctr.split(":"):
            fields = dev.split(",")
            if len(fields) < 4:
                continue
            try:
                devs.append((fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                continue
        if devs:
            out.append(devs)
    return out


def cards_of(register: Sequence[HamiGpu]) -> list[Card]:
    """The healthy cards of a register, indexed by their position in it."""
    return [Card.from_register(g, i) for i, g in enumerate(register) if g.healthy]


def copy_cards(cards: Iterable[Card]) -> list[Card]:
    """Copies to fit a pod on (``dataclasses.replace`` is ten times slower)."""
    out = []
    for c in cards:
        copy = object.__new__(Card)
        copy.__dict__.update(c.__dict__)
        out.append(copy)
    return out
