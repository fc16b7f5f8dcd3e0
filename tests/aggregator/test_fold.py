"""process_window: runtime vs proxy vs _unattributed, hosts, caps, tags, warnings (golden)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from aggregator import synth
from aggregator.fold.rules import MAX_ENERGY_MODELS, MAX_SERVICES, AttributionError
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from aggregator.synth import Svc
from schema.models import HostRow

T0 = datetime(2026, 11, 10, tzinfo=UTC)
A = Svc("checkout", "eu-west-3", energy_kwh=1e-3, requests=7, io_ops=300, model="scaphandre_rapl")
B = Svc("search", "pl", energy_kwh=2e-3, requests=3, io_ops=100, model="io_proxy_v3")


def _write(root, reports, agent="agent-a", files=1, gz=()):
    synth.write_agent(root, agent, synth.split(synth.sealed_lines(reports), files), gzip_files=gz, day="20261110")
    return root


def _win(i, services=(A, B), **kw):
    return synth.window_report(T0 + timedelta(minutes=i), list(services), **kw)


def test_runtime_path_sums_per_service_maps(tmp_path, fold):
    state = fold(_write(tmp_path, [_win(0), _win(1)]))
    a, b = state.services["checkout"], state.services["search"]
    # checkout: 2 windows x 1e-3 kWh; carbon 2 x 1e-3 x 41.5 g/kWh x 1.15 / 1000 = 9.545e-5 kg
    assert a.energy == pytest.approx(2e-3) and a.carbon == pytest.approx(9.545e-5)
    # search in pl: 2 x 2e-3 x 590.8 x 1.5 / 1000 = 3.5448e-3 kg
    assert b.carbon == pytest.approx(3.5448e-3)
    assert (a.requests, a.region, b.region) == (14, "eu-west-3", "pl")
    assert state.runtime_windows == 2 and state.fallback_windows == 0
    assert state.requests == 20  # (7 + 3) x 2 from per_service_requests


def test_proxy_path_splits_by_io_share_and_uses_io_energy(tmp_path, fold):
    state = fold(_write(tmp_path, [synth.v1_dict(_win(0))]))
    a, b = state.services["checkout"], state.services["search"]
    # energy_kwh absent: 400 I/O ops x 1e-7 kWh = 4e-5 kWh; checkout has 300/400 of the ops
    assert a.energy == pytest.approx(3e-5) and b.energy == pytest.approx(1e-5)
    # operational_gco2 = (1e-3 x 41.5 x 1.15 + 2e-3 x 590.8 x 1.5) = 1.820125 g; x 0.75 / 1000
    assert a.carbon == pytest.approx(1.36509375e-3) and b.carbon == pytest.approx(4.5503125e-4)
    assert a.region == "unknown"  # a v1.0 line says nothing about a service's region
    assert state.fallback_windows == 1 and state.runtime_windows == 0


def test_proxy_path_takes_energy_kwh_minus_hosts_when_present(tmp_path, fold):
    host = HostRow(name="pg-main", kind="database", energy_kwh=1e-3, co2_gco2=0.5)
    d = synth.v1_dict(_win(0, hosts=[host]))
    d["green_summary"]["energy_kwh"] = 4e-3
    state = fold(_write(tmp_path, [d]))
    # (4e-3 - 1e-3 host) = 3e-3 kWh split 3:1
    assert state.services["checkout"].energy == pytest.approx(2.25e-3)
    assert state.services["search"].energy == pytest.approx(7.5e-4)
    assert state.energy == pytest.approx(4e-3) and state.host_energy == pytest.approx(1e-3)
    assert state.database_kg == pytest.approx(5e-4)


def test_a_window_with_nothing_to_split_goes_to_unattributed(tmp_path, fold):
    d = synth.v1_dict(_win(0))
    d["per_endpoint_io_ops"] = []
    d["green_summary"]["total_io_ops"] = 0
    state = fold(_write(tmp_path, [d]))
    assert state.services == {} and state.unattributed.windows == 1
    assert state.unattributed.carbon == pytest.approx(1.820125e-3)
    report = build_report(state, Period.everything())
    assert [a.service_name for a in report.applications] == ["_unattributed"]
    assert report.aggregate.unattributed_windows == 1


def test_strict_attribution_fails_naming_file_and_line(tmp_path, fold):
    d = synth.v1_dict(_win(1))
    d["per_endpoint_io_ops"] = []
    d["green_summary"]["total_io_ops"] = 0
    root = _write(tmp_path, [_win(0), d])
    with pytest.raises(AttributionError, match=r"agent-a/windows-20261110-000000\.jsonl:2: window has no"):
        fold(root, strict=True)


def _hosts_and_a_clash(v1: bool) -> dict:
    """A window whose service "pg-main" shares its name with the database host "pg-main" (an
    honest line: energy_kwh = services + in-totals hosts, operational = services' carbon)."""
    hosts = [HostRow(name="pg-main", kind="database", energy_kwh=2e-3, co2_gco2=0.5),
             HostRow(name="kafka", kind="messaging", energy_kwh=1e-3, co2_gco2=0.25),
             HostRow(name="spare", kind="database", in_totals=False, energy_kwh=9.0, co2_gco2=9.0)]
    clash = Svc("pg-main", "pl", energy_kwh=5e-3, requests=2, io_ops=100, model="io_proxy_v3")
    w = _win(0, services=(A, B, clash), hosts=hosts)
    return synth.v1_dict(w) if v1 else w.model_dump(mode="json")


@pytest.mark.parametrize("v1", [False, True], ids=["runtime", "proxy"])
def test_a_service_named_like_a_host_is_a_service_and_hosts_fill_the_breakdown(tmp_path, fold, v1):
    """Hosts and services are separate namespaces (issue 11, item 3): the host rows are the
    only host terms, a per-service entry is a service whatever its name; on both paths
    sum(applications) + hosts = total."""
    w = _hosts_and_a_clash(v1)
    if v1:
        w["green_summary"]["energy_kwh"] = 1e-3 + 2e-3 + 5e-3 + 3e-3  # services + in-totals hosts
    state = fold(_write(tmp_path, [w]))
    report = build_report(state, Period.everything())
    agg = report.aggregate
    assert "pg-main" in state.services and agg.host_named_services == 1
    assert agg.carbon_breakdown.database_kgco2eq == pytest.approx(5e-4)  # 0.5 g; 'spare' not in totals
    assert agg.carbon_breakdown.messaging_kgco2eq == pytest.approx(2.5e-4)
    assert agg.host_energy_kwh == pytest.approx(3e-3)
    apps = sum(a.energy_kwh for a in report.applications)
    # 1e-3 + 2e-3 + 5e-3 (services, pg-main the service among them) + 3e-3 (hosts) = 1.1e-2 kWh
    assert apps + agg.host_energy_kwh == pytest.approx(agg.total_energy_kwh) == pytest.approx(1.1e-2)
    if not v1:
        assert state.services["pg-main"].energy == pytest.approx(5e-3)
        carbon = sum(a.carbon_kgco2eq for a in report.applications)
        assert carbon == pytest.approx(agg.carbon_breakdown.operational_kgco2eq)


def _many_services_window(names, energy=1e-6, start=T0, tags=None):
    rep = synth.window_report(start, [], agent_id="agent-a").model_dump(mode="json")
    gs = rep["green_summary"]
    gs["per_service_energy_kwh"] = {n: energy for n in names}
    gs["per_service_carbon_kgco2eq"] = {n: energy for n in names}
    gs["per_service_energy_model"] = {n: (tags[i] if tags else "io_proxy_v1") for i, n in enumerate(names)}
    gs["co2"]["operational_gco2"] = energy * len(names) * 1000
    return rep


def test_service_cap_drops_new_services_and_reports_their_energy(tmp_path, fold):
    names = [f"s{i:05d}" for i in range(5000)]
    first = _many_services_window(names)
    second = _many_services_window(["s00000", "late-newcomer"], energy=1.0, start=T0 + timedelta(minutes=1))
    state = fold(_write(tmp_path, [first, second]))
    assert len(state.services) == MAX_SERVICES == 4096
    assert state.dropped_services == 5000 - 4096 + 1  # 904 from the first window + the newcomer
    assert state.dropped_energy == pytest.approx(904e-6 + 1.0)
    assert state.services["s00000"].energy == pytest.approx(1.0 + 1e-6)  # known ones keep going
    report = build_report(state, Period.everything())
    total_apps = sum(a.energy_kwh for a in report.applications)
    assert total_apps + report.aggregate.dropped_energy_kwh == pytest.approx(report.aggregate.total_energy_kwh)


def test_energy_model_cap_long_tags_and_cal_merge(tmp_path, fold):
    tags = [f"model_{i:03d}" for i in range(100)] + ["x" * 1024, "scaphandre_rapl+cal", "scaphandre_rapl"]
    names = [f"s{i}" for i in range(len(tags))]
    state = fold(_write(tmp_path, [_many_services_window(names, tags=tags)]))
    assert len(state.models) == MAX_ENERGY_MODELS
    # 36 tags past the cap + the 1 KiB tag; both scaphandre variants also came after the cap
    assert state.rejected_models == 36 + 1 + 2
    few = ["scaphandre_rapl+cal", "scaphandre_rapl", "io_proxy_v2+cal"]
    state = fold(_write(tmp_path / "b", [_many_services_window(["a", "b", "c"], tags=few)]))
    assert list(state.models) == ["scaphandre_rapl", "io_proxy_v2"] and state.calibration_applied
    report = build_report(state, Period.everything())
    assert report.methodology.energy_source_models == ["io_proxy_v2", "scaphandre_rapl"]
    assert report.methodology.calibration_applied is True
    assert report.aggregate.per_service_energy_models == {
        "a": ["scaphandre_rapl"], "b": ["scaphandre_rapl"], "c": ["io_proxy_v2"]}


def test_one_fallback_warning_per_file_and_mixed_counters(mixed_archive, fold, caplog):
    with caplog.at_level(logging.WARNING, logger="carbonspan.aggregate"):
        state = fold(mixed_archive)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3  # agent-a's three files hold v1.0 lines (one in four); agent-b none
    assert all(m.startswith("agent-a/windows-20261110-00000") for m in warned)
    assert (state.runtime_windows, state.fallback_windows) == (85, 15)
    report = build_report(state, Period.everything())
    assert report.aggregate.period_coverage == pytest.approx(0.85)
    assert report.inputs.fallback_files == [
        "agent-a/windows-20261110-000000.jsonl.gz", "agent-a/windows-20261110-000001.jsonl",
        "agent-a/windows-20261110-000002.jsonl"]
    assert report_bytes(report)  # canonical JSON refuses NaN/Inf: building it proves there is none


def test_over_long_service_names_are_dropped_and_counted(tmp_path, fold):
    long_name = "s" * 300  # > 256 bytes
    runtime = _many_services_window(["ok", long_name])
    proxy = synth.v1_dict(_win(1))
    proxy["per_endpoint_io_ops"] = [{"service": long_name, "endpoint": "/", "io_ops": 1}]
    state = fold(_write(tmp_path, [runtime, proxy]))
    assert list(state.services) == ["ok"]
    assert state.dropped_services == 2  # one runtime entry, one proxy entry
    # 1e-6 kWh from the runtime entry + the whole proxy window (sole service of the split):
    # total_io_ops 400 x 1e-7 kWh = 4e-5 kWh
    assert state.dropped_energy == pytest.approx(1e-6 + 4e-5)
