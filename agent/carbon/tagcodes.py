"""Energy-model tags as small integer codes whose order is the precedence order.

The scorer keeps, per (service, region) cell, the highest tag seen; as ``int8`` codes that is
``np.max``/``np.maximum``, and it merges associatively. Code order is the key
``schema.tags.pick_window_tag`` sorts by: (rank, has ``+cal``). Code 0 is "no tag".
"""

from __future__ import annotations

import numpy as np

from schema.tags import (
    ENERGY_MODEL_PRECEDENCE,
    LIVE_INTENSITY_TAGS,
    PROXY_TAGS,
    with_calibration,
)

#: all tags, lowest fidelity first; index = code
TAGS: tuple[str, ...] = ("",) + tuple(
    t
    for base in reversed(ENERGY_MODEL_PRECEDENCE)
    for t in ((base, with_calibration(base)) if base in PROXY_TAGS else (base,))
)
CODE: dict[str, int] = {t: i for i, t in enumerate(TAGS)}

#: tags a measured-energy source may publish (issue 5 lists SPECpower among the sources)
SOURCE_TAGS = frozenset(
    t for t in ENERGY_MODEL_PRECEDENCE if t not in PROXY_TAGS and t not in LIVE_INTENSITY_TAGS
)


def proxy_code(kind_tag: str, calibrated: bool) -> int:
    return CODE[with_calibration(kind_tag) if calibrated else kind_tag]


def _to_v1(code: int) -> int:
    tag = TAGS[code]
    if tag.split("+")[0] in PROXY_TAGS:
        return CODE["io_proxy_v1+cal" if tag.endswith("+cal") else "io_proxy_v1"]
    return code


#: energy-tag code of a cell moved to the ``unknown`` row (annual, so any proxy is v1)
TO_UNKNOWN = np.array([_to_v1(c) for c in range(len(TAGS))], dtype=np.int8)


def max_code(codes: np.ndarray) -> str:
    """Tag of the highest code in ``codes`` ("" when empty or all zero)."""
    return TAGS[int(codes.max())] if codes.size else ""
