"""Derive per-zone intensity profiles from a year of hourly data (run by hand, never at run time).

    python -m agent.carbon.derive_profiles /path/to/grid-intensity-2022-hourly.csv

Reads the wide CSV (``datetime_utc`` then one column of gCO2e/kWh per Electricity Maps
zone, one row per UTC hour of 2022) and writes ``agent/carbon/data/profiles.json``:

    {"source": ..., "vintage": 2022, "zones": {ZONE: {
        "annual_mean": mean of all hours,
        "hourly": [24 means, one per UTC hour of day],
        "monthly_hourly": [[24 means] x 12 months],
        "days_per_month": [31, 28, ...]}}}

Means are rounded to 0.1 g (the source has 0.01 g; the profile is used for its shape, see
docs/carbon-model.md). A zone whose trace is constant (a placeholder in the source: HK, ID,
US-NW-SCL) gets an ``annual_mean`` but no profile. Only the standard library is used, so the
script reads the same on any machine; it is run once and its output committed.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path

OUT = Path(__file__).parent / "data" / "profiles.json"
SOURCE = (
    "Electricity Maps hourly carbon intensity 2022 (life-cycle, UTC), as published with "
    "Sukprasert et al., EuroSys 2024 (umassos/decarbonization-potential); ODbL 1.0 / DbCL 1.0"
)


def _read(path: Path) -> tuple[list[str], list[datetime], list[list[float]]]:
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        stamps: list[datetime] = []
        columns: list[list[float]] = [[] for _ in header[1:]]
        for row in reader:
            stamps.append(datetime.strptime(row[0], "%Y-%m-%dT%H:%MZ"))
            for col, cell in zip(columns, row[1:], strict=True):
                col.append(float(cell))
    return header[1:], stamps, columns


def _zone_profile(stamps: list[datetime], values: list[float]) -> dict:
    sums = [[0.0] * 24 for _ in range(12)]
    counts = [[0] * 24 for _ in range(12)]
    for ts, v in zip(stamps, values, strict=True):
        sums[ts.month - 1][ts.hour] += v
        counts[ts.month - 1][ts.hour] += 1
    hourly = [
        sum(sums[m][h] for m in range(12)) / sum(counts[m][h] for m in range(12)) for h in range(24)
    ]
    out: dict = {"annual_mean": round(sum(values) / len(values), 2)}
    if len(set(values)) > 1:
        out["hourly"] = [round(v, 1) for v in hourly]
        out["monthly_hourly"] = [
            [round(sums[m][h] / counts[m][h], 1) for h in range(24)] for m in range(12)
        ]
        out["days_per_month"] = [counts[m][0] for m in range(12)]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    zones, stamps, columns = _read(Path(argv[0]))
    doc = {
        "source": SOURCE,
        "vintage": 2022,
        "zones": {z: _zone_profile(stamps, col) for z, col in zip(zones, columns, strict=True)},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(zones)} zones, {OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
