"""Decision metrics in the agent's ``/metrics`` style, written as a Prometheus text file (for
node_exporter's textfile collector) by ``carbonspan shadow run --metrics`` and ``carbonspan run
--metrics`` (docs/contracts.md, "Metrics"). Built from decision documents (``Decision.to_json``),
so a file always says what its log says.

The contract is the label ``contract``, not ``job``: Prometheus gives every scraped series
the target label ``job`` (the scrape job) and, by default (``honor_labels: false``), renames a
``job`` label of the scraped data to ``exported_job``, so a dashboard could not group by it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, write_to_textfile

DEFERRAL_BUCKETS = (0, 15, 30, 60, 120, 240, 480, 960)


def registry(decisions: list[dict[str, Any]]) -> CollectorRegistry:
    reg = CollectorRegistry()
    by = Counter("carbonspan_contract_decisions", "Decisions by contract, deciding layer and reason code",
                 ["contract", "layer", "reason"], registry=reg)
    deferral = Histogram("carbonspan_contract_deferral_minutes", "Recommended start minus decision time",
                         ["contract"], buckets=DEFERRAL_BUCKETS, registry=reg)
    slack = Gauge("carbonspan_contract_deadline_slack_minutes", "Deadline minus the p95 finish of the "
                  "latest decision", ["contract"], registry=reg)
    stale = Gauge("carbonspan_contract_signal_staleness_minutes", "Age of the home region's latest "
                  "observation at the latest decision", ["region"], registry=reg)
    kill = Gauge("carbonspan_contract_kill_switch", "1 while the latest decision of a job was the kill "
                 "switch (policy off, default schedule), else 0", ["contract"], registry=reg)
    for d in decisions:
        by.labels(d["job"], d["layer"], d["reason"]).inc()
        deferral.labels(d["job"]).observe(max(0.0, float(d["deferral_minutes"])))
        if d.get("deadline_slack_minutes") is not None:
            slack.labels(d["job"]).set(d["deadline_slack_minutes"])
        sig = d.get("signal") or {}
        if "staleness_minutes" in sig:
            stale.labels(sig["region"]).set(sig["staleness_minutes"])
        kill.labels(d["job"]).set(1.0 if d["reason"] == "kill_switch" else 0.0)
    return reg


def write(path: Path, decisions: list[dict[str, Any]]) -> None:
    """Write the metrics atomically (a scrape never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry(decisions))
