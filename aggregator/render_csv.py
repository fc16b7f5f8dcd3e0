"""The report as CSV files for spreadsheets and BI tools (``aggregate --csv DIR``).

Reads only the disclosure report, like the other renderers. Every header names its unit
(``energy_kwh``, ``operational_carbon_kgco2e`` ...), numbers are written in full precision
(Python's shortest round-trip ``repr``) so a sum in a spreadsheet gives the report's figure,
and rows keep the report's order, so the same archives give the same bytes.

- ``services.csv``: one row per ``applications[]`` entry, every service, no cap; the last
  seven columns are its part from backfilled chains (``applications[].backfill``, zeros when
  the report holds none).
- ``regions.csv``: one row per ``regions[]`` entry.
- ``series.csv``: ``aggregate.series``, per time bucket one ``total`` row and one ``service``
  row per service (every bucket, empty ones as zeros).
"""

from __future__ import annotations

from pathlib import Path

from aggregator.csv_cells import csv_text as _csv
from aggregator.csv_cells import num as _num
from aggregator.render_compare import comparison_csvs
from schema.report import Application, BackfillShare, DisclosureReport

SERVICES_CSV = "services.csv"
REGIONS_CSV = "regions.csv"
SERIES_CSV = "series.csv"

SERVICE_HEADERS = ("service", "region", "energy_kwh", "operational_carbon_kgco2e", "requests", "windows",
                   "share_of_total_carbon_fraction", "operational_gco2e_per_request", "energy_model",
                   "embodied_kgco2e_allocated", "sci_gco2e_per_request", "measured_energy_kwh",
                   "measured_share_fraction",
                   "backfill_energy_kwh", "backfill_operational_carbon_kgco2e", "backfill_requests",
                   "backfill_windows", "backfill_energy_fraction", "backfill_carbon_fraction",
                   "backfill_requests_fraction")
REGION_HEADERS = ("region", "status", "grid_intensity_gco2e_per_kwh", "pue_ratio", "intensity_source",
                  "io_ops", "energy_kwh", "carbon_kgco2e")
SERIES_HEADERS = ("bucket_start_utc", "bucket_end_utc", "row", "service", "windows", "requests", "energy_kwh",
                  "operational_carbon_kgco2e", "carbon_kgco2e", "host_energy_kwh", "embodied_carbon_kgco2e",
                  "host_carbon_kgco2e", "dropped_energy_kwh", "dropped_carbon_kgco2e")


def _opt(value: float | None) -> str:
    """A figure the report may leave null (no requests, no energy): empty, never a made-up 0."""
    return "" if value is None else _num(value)


def _backfill_cells(a: Application) -> list[str]:
    """The service's part from backfilled chains; zeros when the report holds none."""
    b = a.backfill or BackfillShare()
    return [_num(b.energy_kwh), _num(b.carbon_kgco2eq), str(b.requests), str(b.windows), _num(b.energy_share),
            _num(b.carbon_share), _num(b.requests_share)]


def services_csv(report: DisclosureReport) -> str:
    return _csv(SERVICE_HEADERS, [
        [a.service_name, a.region, _num(a.energy_kwh), _num(a.carbon_kgco2eq), str(a.requests), str(a.windows),
         _num(a.share_of_total), _opt(a.operational_gco2e_per_request), a.energy_model,
         _num(a.embodied_kgco2eq), _opt(a.sci_gco2e_per_request), _num(a.measured_energy_kwh),
         _opt(a.measured_share), *_backfill_cells(a)]
        for a in report.applications])


def regions_csv(report: DisclosureReport) -> str:
    return _csv(REGION_HEADERS, [
        [r.region, r.status, _num(r.grid_intensity_gco2_kwh), _num(r.pue), r.intensity_source, str(r.io_ops),
         _num(r.energy_kwh), _num(r.carbon_kgco2eq)]
        for r in report.regions])


def series_csv(report: DisclosureReport) -> str:
    """Per bucket, in time order: its ``total`` row (every figure of the bucket), then one
    ``service`` row per service in ``applications[]`` order (energy, operational carbon,
    requests; the bucket-only columns empty). Filter on ``row`` before summing a column."""
    series = report.aggregate.series
    rows: list[list[str]] = []
    for i, b in enumerate(series.buckets):
        rows.append([b.start, b.end, "total", "", str(b.windows), str(b.requests), _num(b.energy_kwh),
                     _num(b.operational_kgco2eq), _num(b.carbon_kgco2eq), _num(b.host_energy_kwh),
                     _num(b.embodied_kgco2eq), _num(b.host_carbon_kgco2eq), _num(b.dropped_energy_kwh),
                     _num(b.dropped_carbon_kgco2eq)])
        rows += [[b.start, b.end, "service", s.service_name, "", str(s.requests[i]), _num(s.energy_kwh[i]),
                  _num(s.carbon_kgco2eq[i]), "", "", "", "", "", ""] for s in series.services]
    return _csv(SERIES_HEADERS, rows)


def write_csv(report: DisclosureReport, directory: Path) -> list[Path]:
    """Write the CSV files into ``directory`` (created if missing); returns their paths."""

    directory.mkdir(parents=True, exist_ok=True)
    out = []
    files = {SERVICES_CSV: services_csv(report), REGIONS_CSV: regions_csv(report), SERIES_CSV: series_csv(report),
             **comparison_csvs(report)}
    for name, text in files.items():
        path = directory / name
        path.write_text(text, encoding="utf-8", newline="")
        out.append(path)
    return out


#: for the other CSV writers (aggregator.render_compare)
