"""Writing results: per scenario and run a folder of parquet files like OpenDC's, and the
summary table across scenarios (docs/simulation.md, "Outputs")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

SUMMARY_COLUMNS = ("scenario", "policy", "energy_kwh", "carbon_kg", "no_shift_kg", "reduction_pct",
                   "deadline_misses", "mean_delay_h", "p95_delay_h", "forecast")


def write_result(result: Any, out_dir: Path) -> Path:
    """``OUT/<scenario label>/{task,host,powerSource,service}.parquet`` + ``summary.json``."""
    folder = out_dir / result.scenario.label
    folder.mkdir(parents=True, exist_ok=True)
    for name, table in result.tables.items():
        if name in result.scenario.files:
            pq.write_table(table, folder / f"{name}.parquet")
    (folder / "summary.json").write_bytes(orjson.dumps(result.summary, option=orjson.OPT_INDENT_2))
    return folder


def summary_rows(summaries: list[dict]) -> list[dict]:
    rows = []
    for s in summaries:
        red = s.get("reduction_pct")
        rows.append({
            "scenario": s["scenario"], "policy": s["policy"],
            "energy_kwh": round(s["energy_j"] / 3.6e6, 3), "carbon_kg": round(s["carbon_g"] / 1000, 3),
            "no_shift_kg": None if s.get("reference_carbon_g") is None
            else round(s["reference_carbon_g"] / 1000, 3),
            "reduction_pct": None if red is None else round(red, 2),
            "deadline_misses": f"{s['deadline_misses']}/{s['tasks_with_deadline']}",
            "mean_delay_h": round(s["mean_delay_ms"] / 3.6e6, 3),
            "p95_delay_h": round(s["p95_delay_ms"] / 3.6e6, 3), "forecast": s.get("forecast", ""),
        })
    return rows


def render_summary(summaries: list[dict]) -> str:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    table = Table(title="carbonspan simulate")
    rows = summary_rows(summaries)
    # the scenario name whole on one line up to 48 characters (longer ones fold), the forecast
    # label folded into lines of at least 24 (its whole width when shorter); text is never cut with "…" and figures never wrap.
    # The table is 160 wide, wider when those minimums need it (a terminal then wraps its lines)
    def widest(col: str, most: int) -> int:
        return min(max((len(str(r[col])) for r in rows), default=8), most)

    for col in SUMMARY_COLUMNS:
        if col in ("scenario", "policy", "forecast"):
            table.add_column(col, justify="left", overflow="fold",
                             min_width={"scenario": widest("scenario", 48), "forecast": widest("forecast", 24)}.get(col))
        else:
            table.add_column(col, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*("—" if row[c] is None else str(row[c]) for c in SUMMARY_COLUMNS))
    need = Measurement.get(Console(width=10_000), Console(width=10_000).options, table).minimum
    console = Console(width=max(160, need), record=True, force_terminal=False)
    with console.capture() as cap:
        console.print(table)
        for s in summaries:
            busy = {k: v for k, v in s.get("counters", {}).items() if v}
            if busy:
                console.print(f"{s['scenario']}: " + ", ".join(f"{k}={v}" for k, v in busy.items()))
            for note in s.get("notes", []):
                console.print(f"{s['scenario']}: note: {note}", markup=False)
    return cap.get()
