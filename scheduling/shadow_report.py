"""``carbonspan shadow report``: per job and in total, from a shadow log alone (docs/contracts.md,
"Shadow report"). Savings are ranges, never a point claim, and only for runs it could measure.

Per run (E: the run's ``energy_kwh`` (its own, or read from the archives of the contract's
``service``), else the contract's, banded ``[E, E x p95/p50]``; a run with neither is not
measured, estimated or measured, and listed with the reason):

- estimated avoided (before the fact, forecasts as of the decision; measured runs only, so the
  two ranges cover the same runs), per duration d in {p50, p95}:
  ``E x (F_actual - F_recommended) -/+ E x mape x (F_actual + F_recommended)``, ``mape`` the
  forecasts' measured error over this log; range = min .. max over d and the energy band;
- measured avoided (after the fact, observed intensities), per d in {p50, p95, actual}:
  ``E x (O_actual - O_recommended)``; range = min .. max. A run with any uncovered minute in
  either interval is not measured: excluded from both totals, its missing intervals listed.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from scheduling.contracts import DAY_MS
from scheduling.shadow import DECISION, HEADER
from scheduling.signals import to_ms
from schema.chainlog import events as chain_events

REAL_EVIDENCE_DAYS = 14


def _band(ev: dict[str, Any]) -> tuple[float, float] | None:
    c, e = ev["contract"], ev["run"].get("energy_kwh")
    if e is not None:
        return float(e), float(e)
    if c.get("energy_kwh") is None:
        return None  # a service contract whose run the archives did not cover: never zero
    base = float(c["energy_kwh"])
    return base, base * c["p95_minutes"] / c["p50_minutes"]


def forecast_mape(decisions: list[dict[str, Any]]) -> float | None:
    """Mean |forecast - observed| / observed over every interval with both (None: no pair)."""
    errs = []
    for ev in decisions:
        ev_ = ev["evaluation"]
        for d in ("p50", "p95", "actual"):
            for side in ("actual", "recommended"):
                f, o = ev_["forecast"][d][side], ev_["observed"][d][side]
                if f is not None and o:
                    errs.append(abs(f - o) / o)
    return sum(errs) / len(errs) if errs else None


def run_figures(ev: dict[str, Any], mape: float) -> dict[str, Any]:
    band = _band(ev)
    lo_e, hi_e = band or (0.0, 0.0)
    fc, ob = ev["evaluation"]["forecast"], ev["evaluation"]["observed"]
    est: list[float] | None = [] if band is not None else None
    meas: list[float] | None = [] if band is not None else None
    for d in ("p50", "p95") if est is not None else ():
        fa, fr = fc[d]["actual"], fc[d]["recommended"]
        if fa is None or fr is None:
            est = None
            break
        for e in (lo_e, hi_e):
            est += [e * (fa - fr) - e * mape * (fa + fr), e * (fa - fr) + e * mape * (fa + fr)]
    for d in ("p50", "p95", "actual") if meas is not None else ():
        oa, orec = ob[d]["actual"], ob[d]["recommended"]
        if oa is None or orec is None:
            meas = None
            break
        meas += [e * (oa - orec) for e in (lo_e, hi_e)]
    dec, run = ev["decision"], ev["run"]
    start, actual_min = to_ms(dec["start"], "start"), ev["evaluation"]["durations_minutes"]["actual"]
    finish = start + actual_min * 60_000
    deadline = to_ms(dec["deadline"], "deadline") if dec["deadline"] else None
    p95 = ev["contract"]["p95_minutes"] * 60_000
    return {
        "run_id": run["run_id"], "differed": dec["start"] != run["submitted"] or dec["region"] != ev["evaluation"]["actual_region"],
        "delay_minutes": dec["deferral_minutes"], "slack_minutes": dec["deadline_slack_minutes"],
        "estimated_g": None if est is None else [min(est), max(est)],
        "measured_g": None if meas is None else [min(meas), max(meas)],
        "actual_g": None if meas is None else lo_e * ob["actual"]["actual"],
        "deadline_risk": deadline is not None and finish > deadline - p95,
        "would_miss": deadline is not None and finish > deadline,
        "layer": dec["layer"], "reason": dec["reason"], "missing": ev["evaluation"]["missing"],
        "region_substituted": bool(ev["evaluation"].get("region_substituted")),
        "vetoes": Counter(f"{v['layer']}/{v['reason']}" for v in dec["vetoes"]),
        "source": (dec["signal"].get("source"), dec["signal"].get("version")),
        "submitted": to_ms(run["submitted"], "submitted"),
        "energy": ev.get("energy") or {},
        "energy_not_measured": None if band is not None else (ev.get("energy") or {}).get("reason", "no energy"),
    }


def _sum(rows: list[dict[str, Any]], key: str) -> list[float] | None:
    vals = [r[key] for r in rows if r[key] is not None]
    return [sum(v[0] for v in vals) / 1000, sum(v[1] for v in vals) / 1000] if vals else None


def _aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in rows if r["measured_g"] is not None]
    span = (max(r["submitted"] for r in rows) - min(r["submitted"] for r in rows)) / DAY_MS if rows else 0.0
    vetoes: Counter = Counter()
    for r in rows:
        vetoes.update(r["vetoes"])
    return {
        "runs": len(rows), "runs_differed": sum(r["differed"] for r in rows),
        "recommended_delay_minutes": {"mean": sum(r["delay_minutes"] for r in rows) / len(rows) if rows else 0.0,
                                      "max": max((r["delay_minutes"] for r in rows), default=0.0)},
        "deadline_slack_minutes_min": min((r["slack_minutes"] for r in rows if r["slack_minutes"] is not None), default=None),
        # a run it could not measure claims nothing, before the fact either (issue 16)
        "avoided_kgco2e_estimated": _sum(measured, "estimated_g"),
        "avoided_kgco2e_measured": _sum(measured, "measured_g"),
        "emissions_kgco2e_measured_runs": sum(r["actual_g"] for r in measured) / 1000,
        "runs_measured": len(measured), "coverage": len(measured) / len(rows) if rows else 0.0,
        "runs_not_measured": [r["run_id"] for r in rows if r["measured_g"] is None],
        "runs_energy_not_measured": [{"run_id": r["run_id"], "reason": r["energy_not_measured"]}
                                     for r in rows if r["energy_not_measured"] is not None],
        "runs_energy_from_archives": sum(1 for r in rows if r["energy"].get("source") == "archives"
                                         and r["energy"].get("kwh") is not None),
        "missing_intervals": [m for r in rows for m in r["missing"]],
        "runs_region_substituted": sum(r["region_substituted"] for r in rows),
        "deadline_risk": sum(r["deadline_risk"] for r in rows), "would_miss_deadline": sum(r["would_miss"] for r in rows),
        "decisions": dict(Counter(f"{r['layer']}/{r['reason']}" for r in rows)),
        "vetoes": dict(vetoes), "signal_sources": sorted({f"{s} {v}" for r in rows for s, v in [r["source"]] if s}),
        "days": span, "real_evidence": span >= REAL_EVIDENCE_DAYS,
    }


def report(log: Path) -> dict[str, Any]:
    evs = chain_events(log)  # raises, naming the first break, if the chain was altered
    if not evs or evs[0].get("type") != HEADER:
        raise ValueError(f"{log}: not a shadow log (no {HEADER} event first)")
    decisions = [e for e in evs if e.get("type") == DECISION]
    mape = forecast_mape(decisions)
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in decisions:
        by_job[ev["run"]["job"]].append(run_figures(ev, mape or 0.0))
    head = evs[0]
    return {"policy_identity": head["policy_identity"], "job_identities": head.get("job_identities"),
            "signal_type": head["signal_type"],
            "runs_format": head["runs_format"], "runs_skipped": head["runs_skipped"],
            "jobs_without_contract": head["jobs_without_contract"], "forecast_mape": mape,
            "jobs": {j: _aggregate(rs) for j, rs in sorted(by_job.items())},
            "total": _aggregate([r for rs in by_job.values() for r in rs])}


def _range(v: list[float] | None) -> str:
    return "not measured" if v is None else f"{v[0]:.3f} .. {v[1]:.3f}"


def render_text(doc: dict[str, Any]) -> str:
    mape = "n/a" if doc["forecast_mape"] is None else f"{100 * doc['forecast_mape']:.1f} %"
    lines = [f"shadow report: policy {doc['policy_identity'][:19]}..., {doc['signal_type']} signal, "
             f"forecast MAPE {mape}"]
    for name, a in [*doc["jobs"].items(), ("TOTAL", doc["total"])]:
        lines += [f"{name}: {a['runs']} runs, {a['runs_differed']} differed, coverage {100 * a['coverage']:.0f} % "
                  f"over {a['days']:.1f} days{' (real evidence)' if a['real_evidence'] else ''}",
                  f"  avoided kgCO2e estimated {_range(a['avoided_kgco2e_estimated'])}, "
                  f"measured {_range(a['avoided_kgco2e_measured'])} ({a['runs_measured']} runs measured)",
                  f"  delay mean {a['recommended_delay_minutes']['mean']:.0f} min, min slack "
                  f"{a['deadline_slack_minutes_min']} min, deadline risk {a['deadline_risk']}",
                  f"  decisions {a['decisions']}", f"  vetoes {a['vetoes']}"]
        if a["missing_intervals"]:
            lines.append(f"  missing (excluded, never imputed): {len(a['missing_intervals'])} interval(s)")
        if a["runs_energy_from_archives"]:
            lines.append(f"  energy from archives: {a['runs_energy_from_archives']} run(s)")
        for r in a["runs_energy_not_measured"][:5]:
            lines.append(f"  energy not measured, run {r['run_id']}: {r['reason']}")
        if len(a["runs_energy_not_measured"]) > 5:
            lines.append(f"  ... and {len(a['runs_energy_not_measured']) - 5} more run(s) without energy")
    for s in doc["runs_skipped"]:
        lines.append(f"skipped: {s}")
    for j in doc["jobs_without_contract"]:
        lines.append(f"no contract for job {j!r}: its runs are not in the report")
    return "\n".join(lines) + "\n"


#: the HTML table's columns: every per-job figure of the report (docs/contracts.md, "Shadow report")
HTML_COLUMNS: tuple[tuple[str, str], ...] = (
    ("runs", "runs"), ("runs_differed", "differed"), ("recommended_delay_minutes", "delay min (mean / max)"),
    ("deadline_slack_minutes_min", "min slack min"), ("avoided_kgco2e_estimated", "estimated avoided kgCO2e"),
    ("avoided_kgco2e_measured", "measured avoided kgCO2e"), ("emissions_kgco2e_measured_runs", "emitted kgCO2e (measured runs)"),
    ("runs_measured", "runs measured"), ("coverage", "coverage"), ("runs_not_measured", "runs not measured"),
    ("missing_intervals", "missing intervals (excluded)"), ("runs_energy_not_measured", "runs without energy"),
    ("runs_energy_from_archives", "energy from archives"), ("runs_region_substituted", "region substituted"),
    ("deadline_risk", "deadline risk"), ("would_miss_deadline", "would miss deadline"),
    ("decisions", "decisions (layer/reason)"), ("vetoes", "vetoes (layer/reason)"),
    ("signal_sources", "signal sources"), ("days", "days"), ("real_evidence", "real evidence"),
)


def _cell(key: str, v: Any) -> str:
    if key.startswith("avoided_"):
        return _range(v)
    if key == "recommended_delay_minutes":
        return f"{v['mean']:.0f} / {v['max']:.0f}"
    if key == "coverage":
        return f"{100 * v:.0f} %"
    if key == "missing_intervals":
        return "<br>".join(html.escape(f"{r} {a} .. {b}") for r, a, b in v) or "none"
    if key == "runs_energy_not_measured":
        return "<br>".join(html.escape(f"{r['run_id']}: {r['reason']}") for r in v) or "none"
    if isinstance(v, dict):
        return "<br>".join(html.escape(f"{k} {n}") for k, n in sorted(v.items())) or "none"
    if isinstance(v, list):
        return "<br>".join(html.escape(str(x)) for x in v) or "none"
    if isinstance(v, float):
        return f"{v:.3f}" if key == "emissions_kgco2e_measured_runs" else f"{v:.1f}"
    return html.escape("n/a" if v is None else str(v))


def render_html(doc: dict[str, Any]) -> str:
    """Every per-job figure of the report, one row per job and the total."""
    head = "<tr><th>job</th>" + "".join(f"<th>{html.escape(t)}</th>" for _, t in HTML_COLUMNS) + "</tr>"
    body = "".join(
        f"<tr><td>{html.escape(n)}</td>" + "".join(f"<td>{_cell(k, a[k])}</td>" for k, _ in HTML_COLUMNS) + "</tr>"
        for n, a in [*doc["jobs"].items(), ("TOTAL", doc["total"])])
    mape = "n/a" if doc["forecast_mape"] is None else f"{100 * doc['forecast_mape']:.1f} %"
    notes = "".join(f"<li>skipped: {html.escape(x)}</li>" for x in doc["runs_skipped"])
    notes += "".join(f"<li>no contract for job {html.escape(j)}: its runs are not in the report</li>"
                     for j in doc["jobs_without_contract"])
    return (f"<!doctype html><meta charset=utf-8><title>carbonspan shadow report</title><h1>Shadow report</h1>"
            f"<p>policy {html.escape(doc['policy_identity'])}; {html.escape(doc['signal_type'])} signal; "
            f"runs from {html.escape(doc['runs_format'])}; forecast MAPE {mape}</p>"
            f"<table>{head}{body}</table>" + (f"<ul>{notes}</ul>" if notes else "") + "\n")
