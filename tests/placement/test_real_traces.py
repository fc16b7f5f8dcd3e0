"""The packaged 2022 traces, the CSV trace builder and the docs' worked example figures."""

from __future__ import annotations

import pytest

from placement import worked_example
from placement.trace import PACKAGED_CSV, TraceError, load_hourly_csv, parse_trace, trace_from_csv


def test_packaged_traces_carry_their_licence_notice():
    notice = (PACKAGED_CSV.parent / "README.md").read_text()
    assert "ODbL" in notice and "Electricity Maps" in notice and "Sukprasert" in notice
    names, arr = load_hourly_csv()
    assert arr.shape == (8, 8760) and "DE" in names


def test_trace_from_csv_builds_the_issue_format_with_hand_checked_emissions():
    # DE at 2022-01-01T00:00Z is 216.56 g/kWh, at 01:00Z 220.88 (first two CSV rows)
    doc = trace_from_csv([{"id": "j", "submit": 0, "duration": 2, "energy_kwh": 4.0}], zones=["DE"])
    assert doc["method"] == "average-lifecycle" and doc["regions"]["DE"][:2] == [216.56, 220.88]
    import numpy as np

    from placement.evaluate import Placement, job_emissions

    t = parse_trace(doc)
    assert t.basis == "accounting"
    # C = 4 kWh / 2 h × (216.56 + 220.88) = 2 × 437.44 = 874.88 g
    got = job_emissions(t, Placement(np.array([0]), np.array([0])))[0]
    assert got == pytest.approx(874.88)
    with pytest.raises(TraceError, match=r"no column for zone\(s\) \['XX'\]"):
        trace_from_csv([{"id": "j", "submit": 0, "duration": 1, "energy_kwh": 1}], zones=["XX"])


def test_worked_example_figures_match_the_docs():
    temporal = worked_example.evaluate("temporal")
    fg = temporal["forecast-greedy"]
    red = {n: round(v["reduction_pct"], 2) for n, v in fg["policies"].items()}
    assert red == {"carbon-agnostic": 0.0, "lowest-average-region": 0.0, "threshold-shift": 4.33,
                   "oracle": 12.37, "forecast-greedy": 8.81}
    assert fg["verdict"]["action"] == "ship-baseline" and round(fg["delta_pp"], 2) == 4.48
    spatial = worked_example.evaluate("spatial")
    assert round(spatial["forecast-greedy"]["delta_pp"], 2) == 4.99
    assert round(spatial["carbon-aware"]["delta_pp"], 2) == 4.95
    assert round(spatial["carbon-aware"]["policies"]["oracle"]["reduction_pct"], 2) == 62.05
    assert spatial["carbon-aware"]["verdict"]["ships"] == "lowest-average-region"
