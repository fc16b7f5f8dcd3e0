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
twice. Behind the same bearer token as ingest when auth is on (``server_http``).
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


def render(agent_id: str, state: str, open_report: dict[str, Any] | None,
           recent: list[dict[str, Any]], health: dict[str, dict[str, Any]] | None) -> bytes:
    """The page as UTF-8 bytes."""
    if open_report is None:
        open_html = '<p class="muted">no spans in the open window yet</p>'
    else:
        w = open_report["window"]
        open_html = (f'<p>since {_e(w["start"])}: {w["spans"]} spans, {w["io_ops"]} I/O '
                     f"operations, {w['traces']} traces</p>"
                     + _table("open", _SERVICE_HEAD, _service_rows([open_report]), {1, 2, 3}))
    windows = [[r["window"]["start"], r["window"]["end"], r["window"]["spans"],
                f"{r['green_summary'].get('energy_kwh', 0.0):.3e}",
                f"{r['green_summary'].get('co2', {}).get('total', {}).get('mid', 0.0):.3e}"]
               for r in reversed(recent)]
    rejected = _counters(recent + ([open_report] if open_report else []))
    state_cls = "" if state == "ready" else ' class="warn"'
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>carbonspan agent {_e(agent_id)}</title><style>{_CSS}</style></head>
<body>
<h1>carbonspan agent <code>{_e(agent_id)}</code></h1>
<p{state_cls}>state: {_e(state)} · this page reloads every {REFRESH_S} s</p>
<h2>Open window</h2>{open_html}
<h2>Last {len(recent)} archived windows, per service</h2>
{_table("recent-services", _SERVICE_HEAD, _service_rows(recent), {1, 2, 3})}
<h2>Archived windows</h2>
{_table("windows", ("start", "end", "spans", "energy kWh", "carbon gCO2e (total mid)"), windows,
        {2, 3, 4})}
<h2>Sources</h2>{_sources(health, time.time())}
<h2>Refused or ignored input</h2>
{_table("rejected", ("counter", "count"), rejected, {1})}
<p class="muted">Figures are the window reports the agent archives (docs/archive-format.md);
the counters are explained in docs/archive-format.md, "Window report fields".</p>
</body></html>
"""
    return body.encode("utf-8")
