"""schema/signal_log.py on real files: the row format ``scheduling.signals`` reads, and the
writer's promises (no repeats, a changed value is a new observation, whole forecast issues,
restart without repeats, torn tail cut, rotation read back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.signals import SignalLog, parse_lines, read_signal_log
from schema.signal_log import (
    FIELDS,
    SignalLogError,
    SignalLogWriter,
    check_row,
    encode,
    make_row,
    to_ms,
)
from schema.signal_sources import from_gb, from_rte

H = 3_600_000
T0 = to_ms("2026-03-01T00:00:00Z", "t0")


def obs(value: float, start_h: float = 0, seen_h: float = 1.0, region: str = "gb") -> dict:
    return make_row(region, T0 + int(start_h * H), T0 + int((start_h + 0.5) * H), value, "gb-carbon-intensity",
                    "api-2.0", observed_ms=T0 + int(seen_h * H))


def fc(values: list[float], issued_h: float, region: str = "gb") -> list[dict]:
    return [make_row(region, T0 + int((2 + i / 2) * H), T0 + int((2.5 + i / 2) * H), v, "gb-forecast", "api-2.0",
                     issued_ms=T0 + int(issued_h * H)) for i, v in enumerate(values)]


def lines(p: Path) -> list[bytes]:
    return [ln for ln in p.read_bytes().splitlines() if ln]


def test_rows_are_the_format_the_reader_reads() -> None:
    row = obs(182)
    assert list(row) == list(FIELDS) and row["issued_at"] is None
    sig = parse_lines([encode(row).rstrip(b"\n")])
    assert sig.latest("gb") == (T0 + H // 2, 182.0, "gb-carbon-intensity", "api-2.0")
    with pytest.raises(SignalLogError, match="exactly one"):
        make_row("gb", T0, T0 + H, 1, "s", "v", observed_ms=T0, issued_ms=T0)
    for bad, field in ((dict(row, value=-1), "value"), (dict(row, end=row["start"]), "end"),
                       (dict(row, observed_at=None), "observed_at"), (dict(row, start="yesterday"), "start")):
        with pytest.raises(SignalLogError, match=field):
            check_row(bad, "x")


def test_an_unchanged_value_is_not_appended_and_a_changed_one_is_a_new_observation(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    w = SignalLogWriter(p)
    assert w.append([obs(180, seen_h=0.6)]).observations == 1
    again = w.append([obs(180, seen_h=0.7), obs(180, seen_h=0.7)])
    assert (again.observations, again.unchanged) == (0, 2)
    changed = w.append([obs(175, seen_h=0.8)])
    assert changed.observations == 1
    w.close()
    assert len(lines(p)) == 2
    sig = read_signal_log(p)
    assert sig.as_of(T0 + int(0.75 * H)).latest("gb")[1] == 180.0  # as it was known then
    assert sig.latest("gb")[1] == 175.0


def test_a_forecast_issue_is_appended_whole_or_not_at_all(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    w = SignalLogWriter(p)
    assert w.append(fc([100, 110, 120], issued_h=1)).forecasts == 3
    assert w.append(fc([100, 110, 120], issued_h=1.1)).unchanged == 3  # the same forecast, re-read
    res = w.append(fc([100, 115, 120], issued_h=1.2))  # one value moved: the whole new issue
    assert res.forecasts == 3
    assert w.append(fc([90, 90, 90], issued_h=1.15)).unchanged == 3  # older than the log's latest
    w.close()
    sig = read_signal_log(p)
    assert sig.forecast_issue("gb", T0 + int(1.3 * H)) == "2026-03-01T01:12:00Z"
    pred, used = sig.predicted("gb", T0 + int(1.3 * H), [T0 + 2 * H, T0 + int(2.5 * H), T0 + 3 * H])
    assert used == "recorded" and list(pred) == [100, 115, 120]


def test_a_restarted_writer_knows_what_the_log_holds_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    w = SignalLogWriter(p)
    w.append([obs(180)] + fc([100, 110], issued_h=1))
    w.close()
    with p.open("ab") as fh:
        fh.write(b'{"region": "gb", "start": "2026-03-01T0')  # a crash mid-write
    w2 = SignalLogWriter(p)
    w2.open()
    assert w2.torn_bytes == len(b'{"region": "gb", "start": "2026-03-01T0') and w2.seeded == 3
    res = w2.append([obs(180, seen_h=2)] + fc([100, 110], issued_h=2))
    assert (res.observations, res.forecasts, res.unchanged) == (0, 0, 3)
    w2.close()
    assert len(lines(p)) == 3
    read_signal_log(p)  # reads: the torn line is gone


def test_rotation_keeps_two_files_and_the_reader_reads_both(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    one = len(encode(obs(100)))  # every line of this test is as long
    w = SignalLogWriter(p, max_bytes=3 * one)
    rotated = [w.append([obs(100 + i, start_h=i / 2, seen_h=i / 2 + 0.6)]).rotated for i in range(5)]
    w.close()
    assert rotated == [False, False, False, True, False]
    assert len(lines(p.with_name("s.jsonl.1"))) == 3 and len(lines(p)) == 2
    sig: SignalLog = read_signal_log(p)
    assert sig.observed["gb"].start.size == 5 and sig.latest("gb")[1] == 104.0


def test_a_bad_row_is_refused_and_named_the_rest_is_written(tmp_path: Path) -> None:
    w = SignalLogWriter(tmp_path / "s.jsonl")
    res = w.append([dict(obs(1), value=float("nan")), obs(2)])
    w.close()
    assert res.observations == 1 and len(res.invalid) == 1 and "row 0" in res.invalid[0]


def test_the_shared_converters() -> None:
    fetched = T0 + int(0.7 * H)
    rows, n = from_gb({"data": [
        {"from": "2026-03-01T00:30Z", "to": "2026-03-01T01:00Z", "intensity": {"forecast": 170, "actual": 168}},
        {"from": "2026-03-01T01:00Z", "to": "2026-03-01T01:30Z", "intensity": {"forecast": 150, "actual": None}}]},
        fetched, "gb")
    assert n == {"observations": 1, "forecasts": 1, "past_forecasts_left_out": 0, "empty": 0}
    assert [(r["value"], r["observed_at"], r["issued_at"]) for r in rows] == [
        (168.0, "2026-03-01T00:42:00Z", None), (150.0, None, "2026-03-01T00:42:00Z")]
    rows, n = from_rte({"results": [{"date_heure": "2026-03-01T00:15:00+00:00", "taux_co2": 23},
                                    {"date_heure": "2026-03-01T00:00:00+00:00", "taux_co2": None}]}, fetched)
    assert n == {"observations": 1, "empty": 1}
    assert (rows[0]["region"], rows[0]["start"], rows[0]["end"], rows[0]["value"], rows[0]["source"]) == (
        "FR", "2026-03-01T00:15:00Z", "2026-03-01T00:30:00Z", 23.0, "rte-eco2mix")
    assert "direct" in rows[0]["version"]  # taux_co2 is combustion only, not life-cycle
    with pytest.raises(SignalLogError, match="results"):
        from_rte({"error_code": "ODSQLError"}, fetched)
