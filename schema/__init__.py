"""The wire contract shared by the agent, the aggregator, placement and admission.

Imports nothing from the rest of the project. Everything that two parts of carbonspan must
agree on lives here: the window report models, the energy-model tags and their precedence,
canonical JSON and the hash chain, the archive layout (``schema.archive``), the window time
format (``schema.times``) and the terms of a carbon total (``schema.totals``).
"""

from schema.canonical import canonical_json, sha256_tag
from schema.chain import GENESIS_PREV, GENESIS_SEED, ChainFinding, seal, verify_chain
from schema.models import (
    Co2,
    Co2Total,
    EndpointIoOps,
    GreenSummary,
    HostRow,
    RegionRow,
    WindowInfo,
    WindowReport,
)
from schema.tags import ENERGY_MODEL_PRECEDENCE, base_tag, is_measured, pick_window_tag, tag_rank

__all__ = [
    "ENERGY_MODEL_PRECEDENCE",
    "GENESIS_PREV",
    "GENESIS_SEED",
    "ChainFinding",
    "Co2",
    "Co2Total",
    "EndpointIoOps",
    "GreenSummary",
    "HostRow",
    "RegionRow",
    "WindowInfo",
    "WindowReport",
    "base_tag",
    "canonical_json",
    "is_measured",
    "pick_window_tag",
    "seal",
    "sha256_tag",
    "tag_rank",
    "verify_chain",
]
