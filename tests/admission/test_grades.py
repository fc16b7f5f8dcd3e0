"""Estimates and grades from real archive files sealed with schema.chain.seal."""

from __future__ import annotations

import gzip

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.grades import UJ_PER_KWH, estimate_service, grade_of_tag


def _w(ts, energy, model):
    return {"ts": ts, "energy": energy, "model": model}


def test_measured_windows_give_a_measured_estimate(tmp_path, archive):
    archive(
        tmp_path / "agent-1" / "windows-0001.jsonl",
        [
            _w("2026-11-30T10:00:00Z", {"checkout": 0.001}, {"checkout": "scaphandre_rapl"}),
            _w("2026-11-30T10:01:00Z", {"checkout": 0.002}, {"checkout": "kepler_ebpf"}),
        ],
    )
    est = estimate_service(tmp_path, "checkout")
    # mean(0.001, 0.002) kWh = 0.0015 kWh x 3.6e12 µJ/kWh = 5_400_000_000 µJ exactly
    assert (est.estimate_uj, est.grade, est.windows, est.ignored) == (5_400_000_000, "measured", 2, 0)


def test_one_modelled_window_makes_the_estimate_modelled(tmp_path, archive):
    archive(
        tmp_path / "agent-1" / "windows-0001.jsonl",
        [
            _w("2026-11-30T10:00:00Z", {"api": 0.001}, {"api": "alumet_rapl"}),
            _w("2026-11-30T10:01:00Z", {"api": 0.001}, {"api": "io_proxy_v2+cal"}),
        ],
    )
    assert estimate_service(tmp_path, "api").grade == "modelled"


def test_no_data_is_estimator_and_unknown_tags_are_not_evidence(tmp_path, archive):
    archive(
        tmp_path / "agent-1" / "windows-0001.jsonl",
        [_w("2026-11-30T10:00:00Z", {"api": 0.001}, {"api": "declared_watts"})],
    )
    assert estimate_service(tmp_path, "api").grade == "estimator"
    missing = estimate_service(tmp_path, "nobody")
    assert (missing.estimate_uj, missing.grade, missing.windows) == (0, "estimator", 0)
    assert estimate_service(tmp_path / "no-such-dir", "api").windows == 0


def test_only_the_most_recent_windows_count_across_files_and_gzip(tmp_path, archive):
    agent = tmp_path / "agent-7"
    archive(
        agent / "windows-0001.jsonl.gz",
        [_w("2026-11-30T09:00:00Z", {"s": 1.0}, {"s": "cloud_specpower"})],
        gz=True,
    )
    archive(
        agent / "windows-0002.jsonl",
        [
            _w("2026-11-30T10:00:00Z", {"s": 0.000001}, {"s": "redfish_bmc"}),
            _w("2026-11-30T10:01:00Z", {"s": 0.000003}, {"s": "redfish_bmc"}),
        ],
    )
    recent = estimate_service(tmp_path, "s", agent_id="agent-7", windows=2)
    # mean(1e-6, 3e-6) kWh = 2e-6 kWh = 7_200_000 µJ; the older modelled gz window is out
    assert (recent.estimate_uj, recent.grade) == (7_200_000, "measured")
    everything = estimate_service(tmp_path, "s", windows=3)
    assert everything.grade == "modelled"  # the gz window is read, and it is modelled
    assert everything.estimate_uj == -(-(1_000_004 * UJ_PER_KWH) // 3_000_000)  # ceil(1.000004/3 kWh)


def test_untrusted_lines_and_values_are_skipped_and_counted(tmp_path, archive):
    path = tmp_path / "a" / "windows-0001.jsonl"
    archive(path, [_w("2026-11-30T10:00:00Z", {"s": 0.001}, {"s": "scaphandre_rapl"})])
    bad = [
        b'{"ts":"2026-11-30T10:02:00Z","report":{"green_summary":{"per_service_energy_kwh":{"s":NaN}}}}',
        b'{"ts":"2026-11-30T10:03:00Z","report":{"green_summary":{"per_service_energy_kwh":{"s":1e999}}}}',
        b'{"ts":"2026-11-30T10:04:00Z","report":{"green_summary":{"per_service_energy_kwh":{"s":-0.5}}}}',
        b'{"ts":"2026-11-30T10:05:00Z","report":{"green_summary":{"per_service_energy_kwh":{"s":"lots"}}}}',
        b'{"ts":"2026-11-30T10:06:00Z","report":{"green_summary":{"per_service_energy_kwh":[1]}}}',
        b"not json at all",
        b'{"ts":"2026-11-30T10:07:00Z","report":{"green_summary":{"per_service_energy_kwh":{"s":true}}}}',
    ]
    with path.open("ab") as fh:
        fh.write(b"\n".join(bad) + b"\n")
    est = estimate_service(tmp_path, "s")
    assert (est.estimate_uj, est.grade, est.windows) == (3_600_000_000, "measured", 1)
    assert est.ignored == len(bad)


def test_a_truncated_gzip_keeps_what_was_readable(tmp_path, archive):
    path = tmp_path / "a" / "windows-0001.jsonl.gz"
    archive(path, [_w(f"2026-11-30T10:0{i}:00Z", {"s": 0.001}, {"s": "kepler_ebpf"}) for i in range(5)], gz=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 12])  # lose the gzip trailer and some deflate bytes
    est = estimate_service(tmp_path, "s")
    # no exception: whatever decoded before the damage counts, and it is all measured
    assert est.windows <= 5
    assert est.grade == ("measured" if est.windows else "estimator")
    assert gzip.decompress(data).count(b"\n") == 5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10), st.text(max_size=3), st.none()), min_size=1, max_size=6))
def test_sanitiser_never_yields_a_negative_or_non_integer_estimate(tmp_path_factory, values):
    import orjson

    root = tmp_path_factory.mktemp("arch")
    lines = []
    for i, v in enumerate(values):
        try:
            body = orjson.dumps({"s": v})
        except TypeError:
            body = b'{"s":null}'
        lines.append(
            b'{"ts":"2026-11-30T10:%02d:00Z","report":{"green_summary":{"per_service_energy_kwh":%s,'
            b'"per_service_energy_model":{"s":"scaphandre_rapl"}}}}' % (i, body)
        )
    (root / "a").mkdir()
    (root / "a" / "windows-1.jsonl").write_bytes(b"\n".join(lines))
    est = estimate_service(root, "s")
    good = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and v == v
            and v not in (float("inf"), float("-inf")) and v >= 0]
    assert isinstance(est.estimate_uj, int) and est.estimate_uj >= 0
    assert est.windows == len(good)
    assert est.ignored == len(values) - len(good)


def test_grade_of_tag():
    assert grade_of_tag("scaphandre_rapl") == "measured"
    assert grade_of_tag("cloud_specpower") == "modelled"
    assert grade_of_tag("io_proxy_v1+cal") == "modelled"
    assert grade_of_tag("") == grade_of_tag(None) == grade_of_tag("mystery") == "estimator"


def test_grades_from_an_archive_written_by_the_agents_own_writer(tmp_path):
    """The agent's ArchiveWriter and schema models, not a hand-made line: if either renames a
    field the grades read, this fails."""
    from agent.archive import ArchiveWriter
    from schema.models import GreenSummary, WindowInfo, WindowReport

    writer = ArchiveWriter(tmp_path / "agent-9")
    writer.open()
    try:
        for minute, (kwh, tag) in enumerate([(0.002, "cloud_specpower"), (0.004, "kepler_ebpf")]):
            ts = f"2026-11-30T10:0{minute}:00Z"
            report = WindowReport(
                agent_id="agent-9", window=WindowInfo(start=ts, end=ts),
                green_summary=GreenSummary(
                    per_service_energy_kwh={"cart": kwh, "db-proxy": 0.001},
                    per_service_energy_model={"cart": tag, "db-proxy": "io_proxy_v3"},
                ),
            )
            writer.append(report.model_dump(mode="json"), ts=ts)
    finally:
        writer.close()
    cart = estimate_service(tmp_path, "cart")
    # mean(0.002, 0.004) kWh = 0.003 kWh x 3.6e12 µJ/kWh = 10_800_000_000 µJ; one window modelled
    assert (cart.estimate_uj, cart.grade, cart.windows, cart.ignored) == (10_800_000_000, "modelled", 2, 0)
    newest = estimate_service(tmp_path, "cart", windows=1)  # 0.004 kWh x 3.6e12, metered by eBPF
    assert (newest.estimate_uj, newest.grade) == (14_400_000_000, "measured")
    assert estimate_service(tmp_path, "db-proxy").grade == "modelled"
    assert estimate_service(tmp_path, "nobody").grade == "estimator"
