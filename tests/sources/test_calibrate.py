"""carbonspan calibrate: readings CSV + archive window lines -> [green.calibration] factors."""

from __future__ import annotations

import gzip
import json
import math
import time
import tomllib
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import load_config
from agent.sources.calibrate import trapezoid_joules
from carbonspan.cli import main
from schema import times
from schema.archive import BODY_KEY
from schema.chain import seal
from schema.models import EndpointIoOps, WindowInfo, WindowReport

T0 = 1_764_496_800.0  # 2025-11-30T10:00:00Z


def rfc3339(ts: float) -> str:
    """A readings-CSV timestamp (RFC 3339, whole seconds)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_windows(path, windows, gz=False):
    """Sealed archive lines as the agent writes them: {ts, seq, prev, hash, report}."""
    prev, lines = None, []
    for seq, (start, end, ops) in enumerate(windows):
        report = WindowReport(
            window=WindowInfo(start=times.format_ns(int(start * 1e9)), end=times.format_ns(int(end * 1e9)), spans=sum(n for _, _, n in ops)),
            per_endpoint_io_ops=[EndpointIoOps(service=s, endpoint=e, io_ops=n) for s, e, n in ops],
        ).model_dump(mode="json")
        line = seal(prev, seq, times.format_ns(int(end * 1e9)), BODY_KEY, report)
        prev = line["hash"]
        lines.append(orjson.dumps(line))
    data = b"\n".join(lines) + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)


def run(tmp_path, readings: str, capsys, *extra):
    csv = tmp_path / "power.csv"
    csv.write_text(readings)
    code = main(["calibrate", "--readings", str(csv), "--archives", str(tmp_path / "archives"), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_twelve_watts_for_five_seconds_over_8000_ops(tmp_path, capsys):
    write_windows(tmp_path / "archives/node-a/windows-20251130-000000.jsonl",
                  [(T0, T0 + 5, [("checkout", "SELECT orders", 5_000), ("checkout", "POST /pay", 3_000),
                                 ("orders", "INSERT", 10)])])
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{rfc3339(T0)},checkout,12\n"
                                   f"{rfc3339(T0 + 5)},checkout,12\n", capsys)
    assert code == 0
    factors = tomllib.loads(out)["green"]["calibration"]
    # 12 W x 5 s = 60 J = 1.6667e-5 kWh; / 8,000 ops = 2.0833e-9 kWh/op; / 1e-7 = 0.020833
    assert factors["checkout"] == pytest.approx(0.020833, rel=1e-4)
    assert "2.08333e-09 kWh/op" in out
    assert "below 0.1x" in err  # a factor under 0.1 is kept but warned about


def test_trapezoid_pro_rata_windows_gzip_and_bad_lines(tmp_path, capsys):
    root = tmp_path / "archives"
    # the readings cover T0..T0+60; window 1 straddles the start (half inside), window 2 is inside
    write_windows(root / "a/windows-20251130-000000.jsonl.gz",
                  [(T0 - 30, T0 + 30, [("api", "GET", 2_000)]), (T0 + 30, T0 + 60, [("api", "GET", 500)])], gz=True)
    write_windows(root / "b/windows-20251130-000000.jsonl", [(T0 + 100, T0 + 160, [("api", "GET", 9_999)])])
    with (root / "b/windows-20251130-000000.jsonl").open("a") as f:
        f.write('{"torn": \n')
    (root / "a/agent.wal").write_bytes(b"not a window file")
    readings = "timestamp,service,power_watts\n" + "".join(
        f"{T0 + t},API,{w}\n" for t, w in ((0, 10.0), (30, 20.0), (60, 20.0)))
    code, out, err = run(tmp_path, readings, capsys)
    assert code == 0
    # energy: 30 s x (10 + 20) / 2 + 30 s x 20 = 450 + 600 = 1,050 J = 2.916667e-4 kWh
    # ops: 2,000 x 30/60 + 500 = 1,500 -> 1.944444e-7 kWh/op -> factor 1.944444
    assert tomllib.loads(out)["green"]["calibration"]["api"] == pytest.approx(1050 / 3.6e6 / 1500 / 1e-7)
    assert "1 unreadable lines skipped" in err and "from 2 files" in err


def test_energy_rows_and_the_written_table_loads_as_config(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("billing", "q", 400)])])
    # each row: kWh since the previous row; the first row opens the range
    readings = f"timestamp,service,energy_kwh\n{T0},billing,9.9\n{T0 + 30},billing,0.00002\n{T0 + 60},billing,0.00002\n"
    out_file = tmp_path / "calibration.toml"
    code, _, err = run(tmp_path, readings, capsys, "--out", str(out_file))
    assert code == 0 and f"wrote {out_file}" in err
    # 4e-5 kWh / 400 ops = 1e-7 kWh/op: factor 1.0
    cfg = load_config(out_file)
    assert cfg.green.calibration == {"billing": pytest.approx(1.0)}


@pytest.mark.parametrize("body,message", [
    ("timestamp,service,power_watts\n2025-11-30T10:00:00Z,a,-3\n", "power.csv:2: power_watts '-3' is negative"),
    ("timestamp,service,power_watts\n2025-11-30T10:00:00Z,a,nan\n", "negative or not finite"),
    ("time,watts\n1,2\n", "header must be 'timestamp,service,power_watts'"),
    ("timestamp,service,energy_kwh\nyesterday,a,1\n", "timestamp 'yesterday' is neither RFC 3339"),
    ("timestamp,service,energy_kwh\nnan,a,1\n", "power.csv:2: timestamp 'nan' is not a finite number"),
    ("timestamp,service,power_watts\n1," + "a" * 200_000 + ",1\n", "power.csv: not a readable CSV"),
    ("timestamp,service,power_watts\n0,a,1e308\n1e10,a,1e308\n", "the energy of 'a' sums past what a float holds"),
])
def test_bad_readings_are_refused_with_the_line(tmp_path, capsys, body, message):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("a", "q", 1)])])
    code, out, err = run(tmp_path, body, capsys)
    assert code == 1 and out == "" and message in err


def test_no_archives_or_no_ops_say_so(tmp_path, capsys):
    (tmp_path / "archives").mkdir()
    readings = f"timestamp,service,power_watts\n{T0},a,5\n{T0 + 10},a,5\n"
    code, _, err = run(tmp_path, readings, capsys)
    assert code == 1 and "no windows-*.jsonl[.gz] files found" in err
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0 + 500, T0 + 560, [("a", "q", 7)])])
    code, out, err = run(tmp_path, readings, capsys)
    assert code == 1 and "no I/O ops archived in its time range" in out + err


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e4)), min_size=2, max_size=30))
def test_trapezoid_is_bounded_by_min_and_max_power(points):
    joules = trapezoid_joules(points)
    times = [t for t, _ in points]
    watts = [w for _, w in points]
    span = max(times) - min(times)
    assert min(watts) * span * (1 - 1e-9) - 1e-6 <= joules <= max(watts) * span * (1 + 1e-9) + 1e-6
    assert math.isfinite(joules)


def test_a_factor_above_ten_is_written_with_a_warning(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("search", "q", 100)])])
    # 50 W x 60 s = 3,000 J = 8.3333e-4 kWh / 100 ops = 8.3333e-6 kWh/op -> factor 83.333
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{T0},search,50\n{T0 + 60},search,50\n", capsys)
    assert code == 0
    assert tomllib.loads(out)["green"]["calibration"]["search"] == pytest.approx(83.3333, rel=1e-5)
    assert "warning: search: factor 83.33 is above 10x" in err
    assert "# warning: factor 83.33 is above 10x" in out  # kept beside the factor in the TOML


def test_a_factor_the_agent_would_refuse_is_not_written(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl",
                  [(T0, T0 + 60, [("hot", "q", 1), ("cold", "q", 10)])])
    # hot: 1 MW x 60 s = 6e7 J = 16.667 kWh / 1 op -> factor 1.6667e8 > 1e7 (the config's bound)
    # cold: 0 W -> 0 kWh -> factor 0, which the config refuses too (a factor must be > 0)
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{T0},hot,1000000\n{T0 + 60},hot,1000000\n"
                                   f"{T0},cold,0\n{T0 + 60},cold,0\n", capsys)
    assert code == 1  # no usable factor
    table = tomllib.loads(out).get("green", {}).get("calibration", {})
    assert "hot" not in table and "cold" not in table
    assert "outside (0, 1e+07]" in err


def test_a_single_reading_has_no_range_and_says_so(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("a", "q", 10)])])
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{T0 + 30},a,5\n", capsys)
    assert code == 1  # no factor could be derived
    assert "only 1 reading(s) at one time: no time range" in err
    assert "a =" not in out


def test_an_unwritable_out_path_is_a_clear_error(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("a", "q", 10)])])
    readings = f"timestamp,service,power_watts\n{T0},a,5\n{T0 + 60},a,5\n"
    code, _, err = run(tmp_path, readings, capsys, "--out", str(tmp_path / "missing-dir" / "cal.toml"))
    assert code == 1
    assert "cannot write" in err and "missing-dir" in err and "Traceback" not in err


def test_a_spreadsheet_export_with_a_byte_order_mark_is_read(tmp_path, capsys):
    write_windows(tmp_path / "archives/windows-20251130-000000.jsonl", [(T0, T0 + 60, [("a", "q", 600)])])
    csv = tmp_path / "power.csv"
    # 6 W x 60 s = 360 J = 1e-4 kWh / 600 ops = 1.6667e-7 kWh/op -> factor 1.6667
    csv.write_bytes(b"\xef\xbb\xbf" + f"timestamp,service,power_watts\r\n{T0},a,6\r\n{T0 + 60},a,6\r\n".encode())
    code = main(["calibrate", "--readings", str(csv), "--archives", str(tmp_path / "archives")])
    assert code == 0
    assert tomllib.loads(capsys.readouterr().out)["green"]["calibration"]["a"] == pytest.approx(1.66667, rel=1e-5)


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**400), st.floats(), st.text(max_size=8),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_ts = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e309", str(T0), str(T0 + 10), str(T0 + 60), str(T0 - 30),
                                 "2025-11-30T10:00:30Z", "noon"]), _leaf)
_entry = st.one_of(st.fixed_dictionaries({"service": st.sampled_from(["a", "A", "b"]),
                                          "io_ops": st.one_of(st.floats(0, 1e308), st.integers(0, 10**400), _leaf)}),
                   _leaf)
_names = st.sampled_from(["a", "A", "b"])
_summary = st.one_of(st.fixed_dictionaries(
    {"per_service_energy_kwh": st.dictionaries(_names, st.one_of(st.floats(), st.sampled_from([1e308, -1.0, 0.0]), _leaf)),
     "per_service_energy_model": st.dictionaries(_names, st.sampled_from(["io_proxy_v1", "io_proxy_v3+cal", "kepler"]) | _leaf)},
    optional={"per_service_measured_ratio": st.dictionaries(_names, st.floats() | _leaf)}), _leaf)
_report = st.one_of(st.fixed_dictionaries({"window": st.fixed_dictionaries({"start": _ts, "end": _ts}),
                                           "per_endpoint_io_ops": st.lists(_entry, max_size=4)},
                                          optional={"green_summary": _summary}), _leaf)
_line = st.one_of(st.fixed_dictionaries({"report": _report}), st.binary(max_size=20), _leaf)


@given(st.lists(_line, max_size=6))
@settings(max_examples=300, deadline=None)
def test_hostile_archive_lines_are_skipped_and_never_poison_the_ops(lines):
    from agent.sources.calibrate import ArchiveScan, _count_line

    scan = ArchiveScan(ops={"a": 0.0})
    good = orjson.dumps({BODY_KEY: {"window": {"start": times.format_ns(int(T0 * 1e9)),
                                              "end": times.format_ns(int((T0 + 60) * 1e9))},
                                    "per_endpoint_io_ops": [{"service": "a", "endpoint": "q", "io_ops": 60}]}})
    for item in lines:
        _count_line(item if isinstance(item, bytes) else json.dumps(item).encode(), {"a": (T0, T0 + 30)}, scan)
    before = scan.ops["a"]
    _count_line(good, {"a": (T0, T0 + 30)}, scan)
    assert math.isfinite(before) and before >= 0
    assert scan.ops["a"] == pytest.approx(before + 30)  # half of the good window is in range
    weighted = scan.weighted_ops.get("a", 0.0)  # inf means "unusable": plain ops are used
    assert weighted >= 0 and not math.isnan(weighted)
    assert scan.unweighable["a"] >= 1  # the good line has no per-service energy


# ---------------------------------------------------------------- weighted ops

def _sql_request(now_ns: int, statements: list[str]) -> bytes:
    """OTLP/JSON: SQL client spans of checkout (eu-west-3), one per statement."""
    spans = [{"traceId": f"{1:016x}{i:016x}", "spanId": f"{i + 1:016x}", "name": stmt.split()[0], "kind": 3,
              "startTimeUnixNano": str(now_ns - 10**9), "endTimeUnixNano": str(now_ns - 10**9 + 2_000_000),
              "attributes": [{"key": "db.system", "value": {"stringValue": "postgresql"}},
                             {"key": "db.statement", "value": {"stringValue": stmt}}]}
             for i, stmt in enumerate(statements)]
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "checkout"}},
                                    {"key": "cloud.region", "value": {"stringValue": "eu-west-3"}}]},
        "scopeSpans": [{"spans": spans}]}]})  # fmt: skip


def _scored(statements: list[str], start: float, end: float, calibration: dict[str, float] | None = None):
    """The real scorer's window report with per-operation weights on (the default)."""
    from agent.config import parse_green
    from agent.otlp import decode_json
    from agent.score import ScoringContext, score_batch
    from agent.window import build_report

    green = parse_green({"use_hourly_profiles": False, "embodied_carbon_per_request_gco2": 0.0,
                         "calibration": calibration or {}})  # fmt: skip
    assert green.per_operation_coefficients
    now_ns = int(end * 1e9)
    ctx = ScoringContext.from_config(green, now_ns=now_ns)
    return build_report(score_batch(decode_json(_sql_request(now_ns, statements)), ctx), ctx, int(start * 1e9), now_ns)


def _archive(tmp_path, reports) -> None:
    prev, out = None, b""
    for seq, rep in enumerate(reports):
        line = seal(prev, seq, rep.window.end, "report", rep.model_dump(mode="json"))
        prev, out = line["hash"], out + orjson.dumps(line) + b"\n"
    (tmp_path / "archives" / "a1").mkdir(parents=True)
    (tmp_path / "archives" / "a1" / "windows-20251130-000000.jsonl").write_bytes(out)


MIX = ["SELECT * FROM orders WHERE id = $1"] * 300 + ["INSERT INTO orders VALUES ($1)"] * 100


def test_weighted_ops_make_the_calibrated_proxy_reproduce_the_meter(tmp_path, capsys):
    """300 SELECTs (weight 0.5) + 100 INSERTs (1.5) = 400 ops but 300 weighted ops. A meter
    reading 12 W over the 60 s window = 720 J = 2e-4 kWh. Per plain op the factor would be
    2e-4 / 400 / 1e-7 = 5.0 and the calibrated proxy would charge 300 x 1e-7 x 5 = 1.5e-4 kWh
    (75 % of the meter); per weighted op it is 2e-4 / 300 / 1e-7 = 6.6667 and the charge is
    300 x 1e-7 x 6.6667 = 2e-4 kWh: the meter."""
    t_end = float(int(time.time()))
    t0 = t_end - 60
    window = _scored(MIX, t0, t_end)
    assert window.green_summary.per_service_energy_kwh["checkout"] == pytest.approx(3e-5, rel=1e-12)
    _archive(tmp_path, [window])
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{t0},checkout,12\n{t_end},checkout,12\n", capsys)
    assert code == 0
    factor = tomllib.loads(out)["green"]["calibration"]["checkout"]
    assert factor == pytest.approx(2e-4 / 300 / 1e-7, rel=1e-9)
    assert "300 weighted ops" in out and "weighted" in err
    again = _scored(MIX, t0, t_end, {"checkout": factor}).green_summary
    assert again.per_service_energy_model["checkout"].endswith("+cal")
    assert again.per_service_energy_kwh["checkout"] == pytest.approx(2e-4, rel=1e-9)  # the meter


def test_a_window_already_calibrated_makes_the_basis_plain_ops_and_says_why(tmp_path, capsys):
    """Two 30 s windows of the same 400 ops, the second already calibrated (x3, tag +cal):
    its energy no longer says the ops' weights, so the factor is per plain op:
    2e-4 kWh / 800 ops / 1e-7 = 2.5, with a note naming the one window."""
    t_end = float(int(time.time()))
    t0 = t_end - 60
    _archive(tmp_path, [_scored(MIX, t0, t0 + 30), _scored(MIX, t0 + 30, t_end, {"checkout": 3.0})])
    code, out, err = run(tmp_path, f"timestamp,service,power_watts\n{t0},checkout,12\n{t_end},checkout,12\n", capsys)
    assert code == 0
    assert tomllib.loads(out)["green"]["calibration"]["checkout"] == pytest.approx(2.5, rel=1e-12)
    assert "800 ops" in out and "weighted ops" not in out.split("[green.calibration]")[1]
    assert "1 window(s) in range carry no bare-proxy energy" in err


def test_the_exit_status_is_the_one_the_help_states(tmp_path, capsys):
    from agent.sources.cli_calibrate import EPILOG

    assert "Exit status 0 when at least one service got a factor" in EPILOG
    write_windows(tmp_path / "archives/node-a/windows-20251130-000000.jsonl",
                  [(T0, T0 + 5, [("checkout", "SELECT orders", 5_000)])])
    both = f"timestamp,service,power_watts\n{rfc3339(T0)},checkout,12\n{rfc3339(T0 + 5)},checkout,12\n"
    assert run(tmp_path, both + f"{rfc3339(T0)},idle,3\n{rfc3339(T0 + 5)},idle,3\n", capsys)[0] == 0
    assert run(tmp_path, f"timestamp,service,power_watts\n{rfc3339(T0)},idle,3\n{rfc3339(T0 + 5)},idle,3\n",
               capsys)[0] == 1  # no service got a factor
    assert main(["calibrate", "--readings", str(tmp_path / "none.csv"), "--archives", str(tmp_path)]) == 1
