"""docs/placement.md's figure tables are what the code computes (the sample and the real-trace
worked example), so the documentation cannot drift from the evaluator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from placement import worked_example
from placement.decision import Settings
from placement.evaluation import run_evaluation
from placement.sample import sample_trace
from placement.trace import parse_trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "placement.md"
ROW = re.compile(r"\| (\S+?)(?: \(live\))? \| ([\d,.]+) \| ([\d.]+) %(?: \(Δ ([+\-−]?[\d.]+) pp)?")


def doc_table(marker: str) -> dict[str, tuple[float, float, float | None]]:
    """The figure table after ``marker``: policy -> (kg, reduction %, Δ pp or None)."""
    text = DOC.read_text()
    rows: dict[str, tuple[float, float, float | None]] = {}
    for line in text[text.index(marker):].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        m = ROW.match(line)
        if m:
            delta = None if m[4] is None else float(m[4].replace("−", "-"))
            rows[m[1]] = (float(m[2].replace(",", "")), float(m[3]), delta)
    assert rows, f"no figure table after {marker!r} in {DOC}"
    return rows


def computed(results: dict[str, dict], kg_digits: int) -> dict[str, tuple[float, float, float | None]]:
    """The same rows from the evaluations: reference policies from one, each candidate's own."""
    first = next(iter(results.values()))
    out = {n: (round(v["emissions_g"] / 1000, kg_digits), round(v["reduction_pct"], 2), None)
           for n, v in first["policies"].items() if n not in results}
    for cand, r in results.items():
        v = r["policies"][cand]
        out[cand] = (round(v["emissions_g"] / 1000, kg_digits), round(v["reduction_pct"], 2),
                     round(r["delta_pp"], 2))
    return out


def test_sample_table_matches_the_code():
    t = parse_trace(sample_trace())
    results = {c: run_evaluation(t, c, Settings()) for c in ("forecast-greedy", "carbon-aware")}
    assert doc_table("## The sample trace (synthetic)") == computed(results, 3)


@pytest.mark.parametrize("kind, marker", [("temporal", "*Temporal*"), ("spatial", "*Spatial*")])
def test_worked_example_tables_match_the_code(kind, marker):
    assert doc_table(marker) == computed(worked_example.evaluate(kind), 1)


def test_sample_table_shows_the_published_figures_beside_ours():
    from placement.sample import PUBLISHED

    text = DOC.read_text()
    table = text[text.index("## The sample trace (synthetic)"):text.index("## Worked example")]
    shown = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and "%" in cells[3]:  # policy | kg | ours | published
            shown[cells[0].removesuffix(" (live)")] = float(cells[3].split(" %")[0])
    assert shown == PUBLISHED
