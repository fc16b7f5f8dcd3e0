"""Constants that both the agent and the aggregator need, so neither imports the other.

``ENERGY_PER_IO_OP_KWH`` is the I/O proxy's energy per operation (issue 2, the carbon model;
the order of magnitude follows perf-sentinel's I/O proxy: ~0.1 Wh per thousand I/O calls,
before per-operation weights). The aggregator uses it for v1.0 archive lines that carry no
energy figure: ``total_io_ops x ENERGY_PER_IO_OP_KWH``.
"""

from __future__ import annotations

import re

#: kWh per I/O operation for the I/O proxy (weight 1.0).
ENERGY_PER_IO_OP_KWH: float = 1e-7

#: The Software Carbon Intensity formula (Green Software Foundation, SCI specification
#: v1.0, ISO/IEC 21031:2024): carbon per functional unit R.
SCI_FORMULA: str = "SCI = ((E x I) + M) per R"

#: Longest service key or endpoint/region name, in UTF-8 bytes, that a window report carries
#: and a disclosure report keeps. The agent cuts longer names to it; the aggregator refuses
#: longer ones (counted), so everything the agent writes, the aggregator keeps.
MAX_NAME_BYTES: int = 256

#: Longest archive line (without its newline), in bytes, that a reader accepts: the aggregator,
#: ``verify`` and the agent's start-up recovery. A real line with 4,096 services (the per-window
#: cap) and 4,095 endpoints measures 1.2 MiB with 24-byte names and 8.5 MiB with every name at
#: MAX_NAME_BYTES (docs/archive-format.md, "Limits"); 16 MiB is about twice the worst case. A
#: longer line is malformed: counted and skipped to its newline, read in bounded memory.
MAX_LINE_BYTES: int = 16 * 1024 * 1024

#: A region name the agent uses (from a span attribute or the config) and a market factors
#: file may name: 1-64 ASCII letters, digits, ``-`` or ``_``; match the whole string
#: (``fullmatch``). The C decoders apply the same rule (``agent/otlp/_batch.h``).
REGION_RE: re.Pattern[str] = re.compile(r"[A-Za-z0-9_-]{1,64}")
