"""Energy-model tags and their precedence, shared by the agent and the aggregator.

A tag names where a figure's energy (or intensity) came from. Higher fidelity wins when a
window mixes sources: live grid intensity, then measured power, then modelled power, then
the I/O proxy by intensity profile kind. A ``+cal`` suffix marks a proxy figure scaled by a
calibration factor; it never changes a tag's rank.
"""

from __future__ import annotations

from collections.abc import Iterable

CAL_SUFFIX = "+cal"

#: Highest fidelity first.
ENERGY_MODEL_PRECEDENCE: tuple[str, ...] = (
    "electricity_maps_api",
    "grid_operator_api",
    "alumet_rapl",
    "scaphandre_rapl",
    "kepler_ebpf",
    "redfish_bmc",
    "cloud_specpower",
    "io_proxy_v3",
    "io_proxy_v2",
    "io_proxy_v1",
)

MEASURED_TAGS = frozenset({"alumet_rapl", "scaphandre_rapl", "kepler_ebpf", "redfish_bmc"})
LIVE_INTENSITY_TAGS = frozenset({"electricity_maps_api", "grid_operator_api"})
PROXY_TAGS = frozenset({"io_proxy_v3", "io_proxy_v2", "io_proxy_v1"})
#: Energy from a model, not a meter, decided here once for every reader: the I/O proxy, and
#: cloud SPECpower (W = idle + (max - idle) x cpu%: the utilisation is read, the power is
#: modelled). ``is_measured`` is False for them, ``per_service_measured_ratio`` does not
#: count their spans, and pool/1 grades them ``modelled``.
MODELLED_TAGS = PROXY_TAGS | frozenset({"cloud_specpower"})

_RANK = {tag: len(ENERGY_MODEL_PRECEDENCE) - i for i, tag in enumerate(ENERGY_MODEL_PRECEDENCE)}


def base_tag(tag: str) -> str:
    """The tag without its ``+cal`` suffix."""
    return tag[: -len(CAL_SUFFIX)] if tag.endswith(CAL_SUFFIX) else tag


def tag_rank(tag: str) -> int:
    """Fidelity rank (higher is better); 0 for an unknown tag, which never wins."""
    return _RANK.get(base_tag(tag), 0)


def is_measured(tag: str) -> bool:
    """True for tags backed by a power measurement (RAPL, eBPF, BMC); never for
    ``MODELLED_TAGS`` (cloud SPECpower is a model)."""
    return base_tag(tag) in MEASURED_TAGS


def with_calibration(tag: str) -> str:
    """Add ``+cal`` to a proxy tag; measured and live tags are returned unchanged."""
    if base_tag(tag) in PROXY_TAGS and not tag.endswith(CAL_SUFFIX):
        return tag + CAL_SUFFIX
    return tag


def pick_window_tag(tags: Iterable[str]) -> str:
    """The highest-fidelity tag present; ``""`` when there is none.

    Between a bare tag and its ``+cal`` variant of equal rank, the ``+cal`` one is kept, so
    the window says calibration was applied somewhere in it.
    """
    best = ""
    best_key = (0, False)
    for tag in tags:
        if not tag:
            continue
        key = (tag_rank(tag), tag.endswith(CAL_SUFFIX))
        if key > best_key:
            best, best_key = tag, key
    return best
