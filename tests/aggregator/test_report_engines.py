"""The report: determinism, integrity hash, schema drift, HTML; Dask equals local byte for byte."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest
from distributed import Client, LocalCluster

from aggregator import synth
from aggregator.engines import run_dask, run_local
from aggregator.files import discover
from aggregator.read import Period
from aggregator.render_html import render_html
from aggregator.report import build_report, content_hash, load_report, report_bytes
from schema.canonical import canonical_json
from schema.generate import OUT_DIR, render
from schema.report import DisclosureReport
from tests.aggregator.test_series import spread_archives

PERIOD = Period.parse("2026-11-01", "2026-11-30")
PERIOD_T0 = datetime(2026, 11, 10, tzinfo=UTC)


def _report(root, engine=run_local, **kw):
    return build_report(engine(discover([str(root)]), PERIOD, **kw), PERIOD, "ACME")


def test_same_archives_give_byte_identical_canonical_reports(mixed_archive):
    first, second = report_bytes(_report(mixed_archive)), report_bytes(_report(mixed_archive))
    assert first == second
    assert first == canonical_json(json.loads(first)) + b"\n"


def test_content_hash_is_sha256_of_the_report_with_the_hash_empty(mixed_archive):
    report = load_report(report_bytes(_report(mixed_archive)))
    stated = report["integrity"]["content_hash"]
    assert stated.startswith("sha256:") and content_hash(report) == stated
    report["aggregate"]["total_carbon_kgco2eq"] *= 0.5
    assert content_hash(report) != stated


def test_integrity_covers_first_and_last_archive_hash_per_agent(mixed_archive):
    report = _report(mixed_archive)
    lines = {}
    for agent in ("agent-a", "agent-b"):
        files = [f for f in discover([str(mixed_archive / agent)])]
        from aggregator.files import iter_lines

        recs = [json.loads(x) for f in files for x in iter_lines(f)]
        lines[agent] = (recs[0]["hash"], recs[-1]["hash"], len(recs))
    chains = {c.agent: (c.first_hash, c.last_hash, c.windows) for c in report.integrity.chains}
    assert chains == lines
    assert report.integrity.first_archive_hash == lines["agent-a"][0]
    assert report.integrity.last_archive_hash == lines["agent-b"][1]


def test_report_figures_add_up(mixed_archive):
    agg = _report(mixed_archive).aggregate
    b = agg.carbon_breakdown
    assert agg.total_carbon_kgco2eq == pytest.approx(
        b.operational_kgco2eq + b.embodied_kgco2eq + b.database_kgco2eq + b.messaging_kgco2eq)
    assert agg.windows == 100 and agg.runtime_windows + agg.fallback_windows == 100


def test_checked_in_json_schema_matches_the_model():
    assert (OUT_DIR / "disclosure-report.schema.json").read_text() == render(DisclosureReport)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data):
        self.text.append(data)


def test_html_is_self_contained_and_shows_the_figures(mixed_archive):
    report = _report(mixed_archive)
    report.applications[0].service_name = "<script>alert(1)</script>"
    page = render_html(report)
    parser = _Text()
    parser.feed(page)
    text = " ".join(parser.text)
    assert "script" not in parser.tags and parser.urls == []  # no scripts, no external assets
    assert "<script>alert(1)</script>" in text  # shown as text, escaped in the markup
    assert "svg" in parser.tags and parser.tags.count("rect") == len(report.applications) + 2 * len(report.regions)
    for needle in ("ACME", "Per region", "Coverage", "Methodology", "85.0%", "eu-west-3",
                   f"Windows folded start from {report.period.first_window} to {report.period.last_window}",
                   report.integrity.content_hash, report.applications[1].service_name):
        assert needle in text


@pytest.mark.timeout(120)
def test_dask_engine_gives_the_local_report_byte_for_byte(mixed_archive, tmp_path):
    local = report_bytes(_report(mixed_archive))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        seen = []
        distributed = report_bytes(_report(mixed_archive, run_dask, client=client,
                                           progress=lambda i, n, f: seen.append((i, n))))
        # a file overflowing MAX_SERVICES on its own is folded again, seeded, on a worker too
        overflow = _overflow_archive(tmp_path)
        state = run_dask(discover([str(overflow)]), PERIOD, client=client)
        # the time buckets (aggregate.series) merge to the same bytes: hourly and daily periods
        # over two agents' rotated files with windows every 97 minutes and a day missing
        spread = discover([str(spread_archives(tmp_path / "spread"))])
        for period in (Period.parse("2026-11-10", "2026-11-11"), Period.parse("2026-11-10", "2026-11-13")):
            on_dask = build_report(run_dask(spread, period, client=client), period)
            assert report_bytes(on_dask) == report_bytes(build_report(run_local(spread, period), period))
            assert sum(1 for b in on_dask.aggregate.series.buckets if b.windows) >= 3
    assert distributed == local
    assert seen == [(i, 5) for i in range(1, 6)]
    assert report_bytes(build_report(state, PERIOD, "ACME")) == report_bytes(_report(overflow))
    assert state.services["z"].windows == 2 and state.dropped_services == 5


def _overflow_archive(tmp_path):
    """File 1 knows "z"; file 2 holds 4,100 new services and z last. One sequential fold keeps
    z and 4,095 new ones (MAX_SERVICES = 4096) and drops the last 5 new ones."""
    many = [synth.Svc(f"s{i:04d}") for i in range(4100)] + [synth.Svc("z")]
    reports = [synth.window_report(PERIOD_T0, [synth.Svc("z")]), synth.window_report(PERIOD_T0, many)]
    root = tmp_path / "overflow"
    synth.write_agent(root, "agent-c", synth.split(synth.sealed_lines(reports), 2), day="20261110")
    return root


@pytest.mark.timeout(180)
def test_dask_engine_with_its_own_process_cluster(mixed_archive):
    assert report_bytes(_report(mixed_archive, run_dask)) == report_bytes(_report(mixed_archive))
