"""The report says which share of each figure came from backfilled chains.

Lines written by ``carbonspan backfill`` say ``methodology.backfill = "true"``; the fold keeps
what they added (aggregator/fold/reference.py). The term must be exactly the fold of those
lines alone (on hostile archives, through the accelerated fold and the reference), survive the merge and the engines byte for byte, re-derive under ``verify --report``,
and show in every rendering - 0 % when there is none.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from distributed import Client, LocalCluster
from hypothesis import given, settings

from aggregator import synth
from aggregator.engines import fold_lines, run_dask, run_local
from aggregator.files import discover
from aggregator.fold.ext import EXT
from aggregator.fold.fast import fold_line, fold_raw, folder
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.fold.rules import is_backfill
from aggregator.fold.state import AggregateState
from aggregator.lines import Malformed
from aggregator.read import Period, load, window_start
from aggregator.render import summary_table
from aggregator.render_csv import services_csv
from aggregator.render_html import render_html
from aggregator.report import build_report, load_report, report_bytes
from aggregator.verify import verify_report
from tests.aggregator.test_fold_accel import archive, plain_args

T0 = datetime(2026, 11, 10, tzinfo=UTC)
PERIOD = Period.parse("2026-11-10", "2026-11-10")
EVERYTHING = Period.everything()


def _fold(lines: list[bytes], fold: Callable = fold_line, **caps: int) -> AggregateState:
    state = AggregateState(**caps)
    _, stat = fold_lines(lines, "agent-a/w.jsonl", "agent-a", EVERYTHING, state=state, fold=fold)
    state.files.append(stat)
    return state


def _backfilled(raw: bytes) -> bool:
    try:
        rec, _ = load(raw)
    except Malformed:
        return False
    report = rec.get("report")
    return type(report) is dict and is_backfill(report.get("methodology"))


@settings(max_examples=120, deadline=None)
@given(archive())
def test_the_backfill_term_is_the_fold_of_the_backfilled_lines_alone(lines):
    alone = _fold([raw for raw in lines if _backfilled(raw)])
    for fold in (fold_line, fold_line_reference):  # the accelerated fold, the reference
        full = _fold(lines, fold)
        b = full.backfill
        # the very same additions in the same order: equal bit for bit, not merely close
        assert (b.windows, b.energy, b.operational_kg, b.embodied_kg, b.database_kg, b.messaging_kg,
                b.requests) == (alone.windows, alone.energy, alone.operational_kg, alone.embodied_kg,
                                alone.database_kg, alone.messaging_kg, alone.requests)
        credited = {name: acc for name, acc in alone.services.items() if acc.windows}
        if alone.unattributed.windows:
            credited["_unattributed"] = alone.unattributed
        assert set(full.backfill_services) == set(credited)  # (insertion order is not a figure)
        for name, acc in credited.items():
            sums = full.backfill_services[name]
            assert (sums.energy, sums.carbon, sums.requests, sums.windows) == (
                acc.energy, acc.carbon, acc.requests, acc.windows), name
        if fold is fold_line_reference:  # the report is a function of the state compared above: once is enough
            continue
        report = orjson.loads(report_bytes(build_report(full, EVERYTHING)))
        if not b.windows:  # no backfilled window: no block, the bytes of a report before backfill
            assert "backfill" not in report["aggregate"]
            assert all("backfill" not in app for app in report["applications"])
            continue
        agg = report["aggregate"]
        assert agg["backfill"]["windows"] == b.windows
        for key in ("windows_share", "energy_share", "operational_share", "carbon_share", "requests_share"):
            assert 0.0 <= agg["backfill"][key] <= 1.0, key  # a part of a sum of the same terms
        for app in report["applications"]:
            for key in ("energy_share", "carbon_share", "requests_share"):
                assert 0.0 <= app["backfill"][key] <= 1.0, (app["service_name"], key)


def _plain(i: int, backfill: bool) -> bytes:
    rep = synth.window_report(T0 + timedelta(minutes=i), [synth.Svc("a"), synth.Svc("b")]).model_dump(mode="json")
    if backfill:
        rep["methodology"]["backfill"] = "true"
    return orjson.dumps(synth.sealed_lines([rep], seq=i)[0])


def test_the_accelerator_hands_a_backfilled_line_to_the_reference_unchanged():
    lines = [_plain(0, False), _plain(1, False), _plain(2, True), _plain(3, False)]
    assert EXT is not None
    state = AggregateState()
    # the reference caches the layout fold_plain is handed (the byte path caches none)
    fold_lines(lines[:2], "a/w.jsonl", "a", EVERYTHING, state=state, fold=fold_line_reference)
    before = pickle.dumps(state)
    assert fold_raw(state, lines[2], EVERYTHING.start, EVERYTHING.end, folder(state)) is None  # from the bytes: declined
    assert pickle.dumps(state) == before
    rec = orjson.loads(lines[2])
    assert EXT.fold_plain(rec, *plain_args(state, window_start(rec))) is None  # declined ...
    assert pickle.dumps(state) == before  # ... having changed nothing
    rec = orjson.loads(lines[3])
    assert EXT.fold_plain(rec, *plain_args(state, window_start(rec))) is not None  # its neighbours are taken
    state = _fold(lines)
    assert state.backfill.windows == 1 and state.backfill_services["a"].windows == 1
    assert state.backfill_services["a"].energy == orjson.loads(lines[2])["report"]["green_summary"][
        "per_service_energy_kwh"]["a"]


def _two_chains(root: Path) -> Path:
    """agent-a: 20 runtime windows (every 4th a v1.0 line); agent-a-backfill: 10 windows of
    the same services (every 3rd a v1.0 line), every line marked as backfilled."""
    live = synth.sealed_lines(synth.realistic(20, seed=1, n_services=4, start=T0, v1_every=4))
    historic = []
    for rep in synth.realistic(10, seed=2, n_services=4, agent_id="agent-a-backfill", start=T0, v1_every=3):
        body = rep if isinstance(rep, dict) else rep.model_dump(mode="json")
        body["methodology"].update({"backfill": "true", "backfill_hosts": "not charged"})
        historic.append(body)
    synth.write_agent(root, "agent-a", synth.split(live, 2), gzip_files=[1], day="20261110")
    synth.write_agent(root, "agent-a-backfill", synth.split(synth.sealed_lines(historic), 2), day="20261110")
    return root


def _report(root: Path, engine=run_local, **kw):
    return build_report(engine(discover([str(root)]), PERIOD, **kw), PERIOD, "ACME")


def _energy_by_chain(root: Path) -> dict[str, float]:
    """Each chain's energy, summed by hand (math.fsum) from its lines: ``energy_kwh`` of a
    runtime line, ``total_io_ops`` x 1e-7 kWh of a v1.0 line (no hosts in these lines)."""
    out = {}
    for agent in ("agent-a", "agent-a-backfill"):
        terms = []
        for f in sorted((root / agent).glob("windows-*")):
            data = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
            for line in data.splitlines():
                gs = orjson.loads(line)["report"]["green_summary"]
                terms.append(gs["energy_kwh"] if "per_service_energy_kwh" in gs else gs["total_io_ops"] * 1e-7)
        out[agent] = math.fsum(terms)
    return out


def test_shares_are_the_hand_computed_split_and_verify_re_derives_them(tmp_path):
    root = _two_chains(tmp_path / "archives")
    report = _report(root)
    agg = report.aggregate
    assert agg.backfill is not None and agg.backfill.windows == 10 and agg.windows == 30
    assert agg.backfill.windows_share == pytest.approx(10 / 30)
    chains = _energy_by_chain(root)
    live_total, hist_total = chains["agent-a"], chains["agent-a-backfill"]
    assert agg.backfill.energy_kwh == pytest.approx(hist_total, rel=1e-12)
    assert agg.backfill.energy_share == pytest.approx(hist_total / (live_total + hist_total), rel=1e-12)
    for app in report.applications:  # with the v1.0 lines' I/O split: from the folded figures
        assert app.backfill is not None
        assert app.backfill.energy_share == pytest.approx(app.backfill.energy_kwh / app.energy_kwh, rel=1e-12)
        assert 0.0 < app.backfill.energy_share < 1.0
    # verify --report re-derives the same bytes, backfill shares included
    doc = load_report(report_bytes(report))
    assert verify_report(discover([str(root)]), doc) == []
    doc["applications"][0]["backfill"]["energy_share"] = 0.5
    from aggregator.report import content_hash

    doc["integrity"]["content_hash"] = content_hash(doc)  # a consistent but false report
    found = verify_report(discover([str(root)]), doc)
    assert [f.kind for f in found] == ["rederivation_mismatch"] and "applications" in found[0].message


def test_runtime_only_shares_equal_the_lines_split(tmp_path):
    """Without v1.0 lines every service's share is its backfill lines' energy over all its
    lines' energy, summed by hand."""
    root = tmp_path / "archives"
    live = synth.sealed_lines(synth.realistic(12, seed=4, n_services=3, start=T0))
    historic = [rep.model_dump(mode="json") for rep in
                synth.realistic(6, seed=5, n_services=3, agent_id="agent-b-backfill", start=T0)]
    for body in historic:
        body["methodology"]["backfill"] = "true"
    synth.write_agent(root, "agent-b", [live], day="20261110")
    synth.write_agent(root, "agent-b-backfill", [synth.sealed_lines(historic)], day="20261110")
    report = _report(root)
    sums: dict[str, dict[str, list[float]]] = {}
    for rec in live + synth.sealed_lines(historic):
        chain = "backfill" if rec["report"]["methodology"].get("backfill") else "live"
        for name, kwh in rec["report"]["green_summary"]["per_service_energy_kwh"].items():
            sums.setdefault(name, {"live": [], "backfill": []})[chain].append(kwh)
    for app in report.applications:
        bf, lv = math.fsum(sums[app.service_name]["backfill"]), math.fsum(sums[app.service_name]["live"])
        assert app.backfill is not None and app.backfill.windows == 6
        assert app.backfill.energy_share == pytest.approx(bf / (bf + lv), rel=1e-12)


@pytest.mark.timeout(120)
def test_dask_gives_the_local_report_byte_for_byte_with_backfill(tmp_path):
    root = _two_chains(tmp_path / "archives")
    local = report_bytes(_report(root))
    assert b'"backfill":{' in local
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        distributed = report_bytes(_report(root, run_dask, client=client))
    assert distributed == local
    # what a process cluster ships: the per-file states, pickled
    states = [pickle.loads(pickle.dumps(s)) for s in (run_local([f], PERIOD) for f in discover([str(root)]))]
    total = AggregateState()
    for s in states:
        total.merge(s)
    assert report_bytes(build_report(total, PERIOD, "ACME")) == local


def test_every_rendering_shows_the_share_and_zero_without_backfill(tmp_path):
    with_bf = _report(_two_chains(tmp_path / "a"))
    root = tmp_path / "b"
    synth.write_agent(root, "agent-a", [synth.sealed_lines(synth.realistic(5, seed=1, n_services=2, start=T0))],
                      day="20261110")
    without = _report(root)
    assert without.aggregate.backfill is None and b'"backfill"' not in report_bytes(without)

    for report, share in ((with_bf, with_bf.aggregate.backfill.carbon_share), (without, 0.0)):  # type: ignore[union-attr]
        from rich.console import Console

        console = Console(file=io.StringIO(), width=300, color_system=None)
        console.print(summary_table(report, max_rows=None))
        text = console.file.getvalue()  # type: ignore[attr-defined]
        # a backfill column per service when the report has backfill; the totals' line always
        assert ("backfill: the share of the service's carbon" in " ".join(text.split())) == (report is with_bf)
        assert f"of energy, {share:.1%} of carbon" in text
        assert "from backfilled chains:" in text
        rows = list(csv.DictReader(io.StringIO(services_csv(report))))
        assert len(rows) == len(report.applications)
        for row, app in zip(rows, report.applications, strict=True):
            expected = app.backfill.energy_share if app.backfill else 0.0
            assert float(row["backfill_energy_fraction"]) == expected
            assert float(row["backfill_carbon_fraction"]) == (app.backfill.carbon_share if app.backfill else 0.0)
        page = render_html(report)
        assert f"From backfill<b>{share:.1%}</b>" in page
        assert "carbon from backfill" in page
    assert "0.0% of energy, 0.0% of carbon, 0.0% of requests (0 of 5 windows)" in render_html(without)
