"""``GET /`` on the agent's HTTP port: what the agent is doing, as one self-contained page.

No scripts and no external URLs (the page works air-gapped and behind any proxy); it reloads
itself every ``REFRESH_S`` seconds with ``<meta http-equiv="refresh">``. It shows:

- the open window so far (start, spans, and per service energy, carbon, requests, model tag),
  as the window report it would archive now;
- the last ``len(recent)`` archived windows per service (summed) and one row per window;
- the measured-energy and live-intensity sources' freshness (``SourceManager.health``): state,
  last success as UTC time and age, failures, fresh/stale signal and the last error;
- what was refused or ignored (the windows' ``counters``), so a bad exporter is visible here.

Every figure is read from the same window reports the agent archives; nothing is computed
twice. With ``--workers N`` the page sums every worker's figures (``agent/metrics_share.py``
reads them) and lists the workers, naming any it left out and why. Behind the same bearer token
as ingest when auth is on (``server_http``).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

REFRESH_S = 5

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.2em 0}
th,td{padding:.25em .7em;border-bottom:1px solid #d8dee4;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#57606a}.warn{color:#9a6700}.bad{color:#cf222e}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(cls: str, header: Iterable[str], rows: list[list[object]], numeric: set[int]) -> str:
    if not rows:
        return '<p class="muted">none yet</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _service_rows(reports: list[dict[str, Any]]) -> list[list[object]]:
    energy: dict[str, float] = {}
    carbon: dict[str, float] = {}
    requests: dict[str, int] = {}
    model: dict[str, str] = {}
    for rep in reports:
        gs = rep.get("green_summary", {})
        for s, kwh in gs.get("per_service_energy_kwh", {}).items():
            energy[s] = energy.get(s, 0.0) + kwh
        for s, kg in gs.get("per_service_carbon_kgco2eq", {}).items():
            carbon[s] = carbon.get(s, 0.0) + kg
        for s, n in gs.get("per_service_requests", {}).items():
            requests[s] = requests.get(s, 0) + n
        model.update(gs.get("per_service_energy_model", {}))
    order = sorted(energy, key=lambda s: (-carbon.get(s, 0.0), s))
    return [[s, f"{energy[s]:.3e}", f"{carbon.get(s, 0.0) * 1000:.3e}", requests.get(s, 0),
             model.get(s, "") or "-"] for s in order]


_SERVICE_HEAD = ("service", "energy kWh", "carbon gCO2e", "requests", "energy model")


def _counters(reports: list[dict[str, Any]]) -> list[list[object]]:
    total: dict[str, int] = {}
    for rep in reports:
        for k, v in rep.get("counters", {}).items():
            total[k] = total.get(k, 0) + int(v)
    return [[k, v] for k, v in sorted(total.items())]


def _since(last_success: float | None, now: float) -> str:
    """``last_success`` (Unix seconds) as UTC time and age, or ``never``."""
    if last_success is None:
        return "never"
    at = datetime.fromtimestamp(last_success, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{at} ({max(0.0, now - last_success):.0f} s ago)"


def _sources(health: dict[str, dict[str, Any]] | None, now: float) -> str:
    if health is None:
        return '<p class="muted">no [sources] configured: energy is the I/O proxy, intensity ' \
               "the annual/profile tables</p>"
    rows = [[name, "ok" if h.get("ok") else "failing", _since(h.get("last_success"), now),
             h.get("failures", 0), "stale" if h.get("stale") else "fresh",
             h.get("last_error") or "-"]
            for name, h in sorted(health.items())]
    return _table("sources", ("source", "state", "last success", "failures", "signal",
                              "last error"), rows, {3})


def _workers(workers: list[dict[str, Any]], answering: int) -> str:
    """The workers of ``--workers N``: whose figures the page sums, and whose it left out."""
    rows = []
    for w in workers:
        age = "-" if w.get("age") is None else f"{w['age']:.1f} s"
        if "why" in w:
            rows.append([w["worker"], "-", "-", age, "-", f"left out: {w['why']}"])
        else:
            spans = w["open"]["window"]["spans"] if w.get("open") else 0
            note = "this answer" if w["worker"] == answering else "summed"
            rows.append([w["worker"], w["agent_id"], w["state"], age, spans, note])
    return _table("workers", ("worker", "chain", "state", "figures' age", "open-window spans",
                              "on this page"), rows, {4})


def render(agent_id: str, state: str, open_report: dict[str, Any] | None,
           recent: list[dict[str, Any]], health: dict[str, dict[str, Any]] | None,
           workers: list[dict[str, Any]] | None = None, answering: int = 0) -> bytes:
    """The page as UTF-8 bytes. With ``workers`` (``--workers N``: every worker's figures as
    ``agent/metrics_share.py`` reads them, this one's included) the figures are their sums."""
    shown = [w for w in workers or () if "why" not in w]
    opens = ([open_report] if open_report else []) if workers is None else \
        [w["open"] for w in shown if w.get("open")]
    if workers is not None:
        recent = sorted((r for w in shown for r in w["recent"]), key=lambda r: r["window"]["start"])
        by_id = {id(r): w["worker"] for w in shown for r in w["recent"]}
    if not opens:
        open_html = '<p class="muted">no spans in the open window yet</p>'
    else:
        spans = sum(r["window"]["spans"] for r in opens)
        io_ops = sum(r["window"]["io_ops"] for r in opens)
        traces = sum(r["window"]["traces"] for r in opens)
        start = min(r["window"]["start"] for r in opens)
        whose = "" if workers is None else f" (the open windows of {len(opens)} worker(s), summed)"
        open_html = (f'<p>since {_e(start)}: {spans} spans, {io_ops} I/O '
                     f"operations, {traces} traces{_e(whose)}</p>"
                     + _table("open", _SERVICE_HEAD, _service_rows(opens), {1, 2, 3}))
    windows = [([by_id[id(r)]] if workers is not None else [])
               + [r["window"]["start"], r["window"]["end"], r["window"]["spans"],
                  f"{r['green_summary'].get('energy_kwh', 0.0):.3e}",
                  f"{r['green_summary'].get('co2', {}).get('total', {}).get('mid', 0.0):.3e}"]
               for r in reversed(recent)]
    window_head = ("start", "end", "spans", "energy kWh", "carbon gCO2e (total mid)")
    window_num = {2, 3, 4}
    if workers is not None:
        window_head, window_num = ("worker", *window_head), {3, 4, 5}
    rejected = _counters(recent + opens)
    if workers is None:
        workers_html = ""
    else:
        left = len(workers) - len(shown)
        warn = ' class="warn"' if left else ""
        workers_html = (f"<h2>Workers</h2><p{warn}>{len(workers)} "
                        f"workers share this agent's ports; this page sums the figures of "
                        f"{len(shown)} of them"
                        + (f" ({left} left out: see below)" if left else "") + ".</p>"
                        + _workers(workers, answering))
    state_cls = "" if state == "ready" else ' class="warn"'
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>carbonspan agent {_e(agent_id)}</title><style>{_CSS}</style></head>
<body>
<h1>carbonspan agent <code>{_e(agent_id)}</code></h1>
<p{state_cls}>state: {_e(state)} · this page reloads every {REFRESH_S} s</p>
{workers_html}
<h2>Open window</h2>{open_html}
<h2>Last {len(recent)} archived windows, per service</h2>
{_table("recent-services", _SERVICE_HEAD, _service_rows(recent), {1, 2, 3})}
<h2>Archived windows</h2>
{_table("windows", window_head, windows, window_num)}
<h2>Sources</h2>{_sources(health, time.time())}
<h2>Refused or ignored input</h2>
{_table("rejected", ("counter", "count"), rejected, {1})}
<p class="muted">Figures are the window reports the agent archives (docs/archive-format.md);
the counters are explained in docs/archive-format.md, "Window report fields".</p>
</body></html>
"""
    return body.encode("utf-8")
