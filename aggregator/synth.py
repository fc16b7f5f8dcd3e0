"""Synthetic archives: real sealed window files for tests, the benchmark and demos.

Builds ``schema.WindowReport`` values whose figures obey the window invariants (per-service
carbon = energy x intensity x PUE; ``energy_kwh`` = services + hosts in totals), seals them
with ``schema.chain.seal`` into the pinned archive layout (``schema.archive``:
``<root>/<agent>/windows-<YYYYMMDD>-<NNNNNN>.jsonl``, optionally gzipped), one hash chain per
agent across its files, with the agent's window times (``schema.times``, 27 characters).
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from schema import times
from schema.archive import BODY_KEY, GZIP_SUFFIX, window_file_name
from schema.chain import seal
from schema.constants import ENERGY_PER_IO_OP_KWH
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
from schema.totals import carbon_total

#: region -> (gCO2e/kWh, PUE): a few rows of the annual table (Ember yearly data; provider PUE).
REGIONS: dict[str, tuple[float, float]] = {
    "eu-west-3": (41.5, 1.15),
    "eu-central-1": (329.6, 1.15),
    "us-east-1": (379.0, 1.15),
    "pl": (590.8, 1.5),
}


@dataclass(frozen=True)
class Svc:
    """One service's work in a window: its region, energy, requests and I/O ops."""

    name: str
    region: str = "eu-west-3"
    energy_kwh: float = 1e-5
    requests: int = 10
    io_ops: int = 100
    model: str = "io_proxy_v1"


def window_report(start: datetime, services: Sequence[Svc], *, runtime: bool = True,
                  agent_id: str = "agent-a", length_s: int = 60, hosts: Sequence[HostRow] = (),
                  embodied_g: float = 0.0) -> WindowReport:
    """A consistent window. ``runtime=False`` gives a v1.0 line (no runtime maps). A host row
    given without watts draws its energy over the whole window (watts = kWh x 3.6e6 / length),
    as the agent's rows do."""
    hosts = [h if h.watts or not length_s else h.model_copy(update={"watts": h.energy_kwh * 3.6e6 / length_s})
             for h in hosts]
    per_energy = {s.name: s.energy_kwh for s in services}
    per_carbon = {
        s.name: s.energy_kwh * REGIONS[s.region][0] * REGIONS[s.region][1] / 1000.0 for s in services
    }
    regions: dict[str, RegionRow] = {}
    for s in services:
        intensity, pue = REGIONS[s.region]
        row = regions.setdefault(
            s.region, RegionRow(region=s.region, status="resolved", grid_intensity_gco2_kwh=intensity, pue=pue)
        )
        row.io_ops += s.io_ops
        row.energy_kwh += s.energy_kwh
        row.co2_gco2 += per_carbon[s.name] * 1000.0
    operational_g = sum(per_carbon.values()) * 1000.0
    db_g = sum(h.co2_gco2 for h in hosts if h.in_totals and h.kind == "database")
    msg_g = sum(h.co2_gco2 for h in hosts if h.in_totals and h.kind == "messaging")
    host_kwh = sum(h.energy_kwh for h in hosts if h.in_totals)
    mid = carbon_total(operational_g, embodied_g, db_g, msg_g)
    io_total = sum(s.io_ops for s in services)
    model = services[0].model if services else ""
    gs = GreenSummary(
        total_io_ops=io_total,
        co2=Co2(total=Co2Total(low=mid * 0.5, mid=mid, high=mid * 2, model=model,
                               methodology="sci_operational_embodied_hosts"),
                operational_gco2=operational_g, embodied_gco2=embodied_g,
                database_gco2=db_g, messaging_gco2=msg_g),
        regions=list(regions.values()),
        hosts=list(hosts),
    )
    if runtime:
        gs.energy_kwh = sum(per_energy.values()) + host_kwh
        gs.energy_model = model
        gs.per_service_energy_kwh = per_energy
        gs.per_service_carbon_kgco2eq = per_carbon
        gs.per_service_region = {s.name: s.region for s in services}
        gs.per_service_energy_model = {s.name: s.model for s in services}
        gs.per_service_measured_ratio = {s.name: 0.0 for s in services}
        gs.per_service_requests = {s.name: s.requests for s in services}
    return WindowReport(
        agent_id=agent_id,
        window=WindowInfo(start=times.format_datetime(start),
                          end=times.format_datetime(start + timedelta(seconds=length_s)),
                          spans=sum(s.requests for s in services) * 3,
                          traces=sum(s.requests for s in services),
                          root_spans=sum(s.requests for s in services), io_ops=io_total),
        green_summary=gs,
        per_endpoint_io_ops=[EndpointIoOps(service=s.name, endpoint="GET /", io_ops=s.io_ops)
                             for s in services],
        methodology={"intensity_table": "ember-yearly", "intensity_vintage": "2024",
                     "pue_source": "provider sustainability reports",
                     "io_coefficients": "perf-sentinel io proxy v1"},
    )


def v1_dict(report: WindowReport) -> dict[str, Any]:
    """The report as a v1.0 agent wrote it: the runtime fields absent, not merely empty."""
    d = report.model_dump(mode="json")
    for key in ("energy_kwh", "energy_model", "per_service_energy_kwh", "per_service_carbon_kgco2eq",
                "per_service_region", "per_service_energy_model", "per_service_measured_ratio",
                "per_service_requests"):
        d["green_summary"].pop(key, None)
    return d


def sealed_lines(reports: Iterable[WindowReport | dict[str, Any]], prev: str | None = None,
                 seq: int = 0) -> list[dict[str, Any]]:
    """Chain ``reports`` (models or already-dumped dicts) after ``prev``."""
    out = []
    for rep in reports:
        body = rep if isinstance(rep, dict) else rep.model_dump(mode="json")
        rec = seal(prev, seq, body["window"]["end"], BODY_KEY, body)
        out.append(rec)
        prev, seq = rec["hash"], seq + 1
    return out


def write_agent(root: Path, agent: str, files: Sequence[Sequence[dict[str, Any]]],
                gzip_files: Iterable[int] = (), day: str = "20261130") -> list[Path]:
    """Write one agent's already-sealed records as rotated files; returns their paths."""
    directory = root / agent
    directory.mkdir(parents=True, exist_ok=True)
    gz = set(gzip_files)
    paths = []
    for i, records in enumerate(files):
        data = b"".join(orjson.dumps(r) + b"\n" for r in records)
        path = directory / window_file_name(day, i)
        if i in gz:
            path = path.with_name(path.name + GZIP_SUFFIX)
            data = gzip.compress(data, mtime=0)
        path.write_bytes(data)
        paths.append(path)
    return paths


def split(records: Sequence[dict[str, Any]], parts: int) -> list[list[dict[str, Any]]]:
    """Cut a chain into ``parts`` consecutive files (rotation)."""
    size = max(1, -(-len(records) // parts))
    return [list(records[i : i + size]) for i in range(0, len(records), size)]


def realistic(n_windows: int, seed: int = 0, n_services: int = 10, agent_id: str = "agent-a",
              start: datetime | None = None, v1_every: int = 0) -> list[WindowReport | dict]:
    """``n_windows`` one-minute windows of ``n_services`` services over a few regions."""
    rng = random.Random(seed)
    t0 = start or datetime(2026, 11, 1, tzinfo=UTC)
    names = [f"svc-{i:02d}" for i in range(n_services)]
    regions = list(REGIONS)
    out: list[WindowReport | dict] = []
    for i in range(n_windows):
        svcs = [
            Svc(n, regions[(j + seed) % len(regions)], energy_kwh=rng.randint(1, 5000) * ENERGY_PER_IO_OP_KWH,
                requests=rng.randint(1, 200), io_ops=rng.randint(1, 5000),
                model="scaphandre_rapl" if j % 3 == 0 else "io_proxy_v3")
            for j, n in enumerate(names)
        ]
        rep = window_report(t0 + timedelta(minutes=i), svcs, agent_id=agent_id)
        out.append(v1_dict(rep) if v1_every and i % v1_every == 0 else rep)
    return out
