"""The workload contract: every field validated with a message naming it, YAML files with one or
many contracts, Kubernetes annotation values, and timezone-aware windows (docs/contracts.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduling.contracts import (
    ANNOTATION,
    ContractError,
    from_annotation,
    load_contracts,
    local_day,
    parse_contract,
    window,
)

ISSUE_EXAMPLE = """\
workload_contract:
  name: nightly-search-reindex
  class: flexible            # immediate | deadline | flexible
  earliest_start: "00:00"    # local time in `timezone`, or an RFC 3339 instant
  deadline: "06:00"          # completion deadline
  timezone: Asia/Seoul
  max_deferral_minutes: 240
  runtime: {p50_minutes: 90, p95_minutes: 120}
  energy_kwh: 12             # or `service: reindexer` to take it from carbonspan archives
  residency: [ap-northeast-2]
  home_region: ap-northeast-2
  accelerator: none
  checkpoint: required       # none | optional | required
  cancellation: safe         # safe | unsafe
  fallback: run_by_deadline  # run_at_submit | run_by_deadline | home_region
  carbon_policy: prefer_lower_intensity
"""

BASE = {"name": "j", "class": "flexible", "deadline": "06:00", "max_deferral_minutes": 60,
        "runtime": {"p50_minutes": 10, "p95_minutes": 20}, "energy_kwh": 1.0,
        "residency": ["r1"], "home_region": "r1"}


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_the_issue_example_loads(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(ISSUE_EXAMPLE)
    c = load_contracts(f)["nightly-search-reindex"]
    assert (c.job_class, c.timezone, c.max_deferral_minutes) == ("flexible", "Asia/Seoul", 240)
    assert (c.runtime.p50_minutes, c.runtime.p95_minutes, c.energy_kwh) == (90, 120, 12)
    assert c.may_wait and c.may_pause_or_move and c.fallback == "run_by_deadline"


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"class": "sometimes"}, "class", "immediate"),
    ({"timezone": "Mars/Olympus"}, "timezone", "IANA"),
    ({"deadline": "6am"}, "deadline", "HH:MM"),
    ({"deadline": "2026-03-01T06:00:00"}, "deadline", "offset"),
    ({"earliest_start": "25:00"}, "earliest_start", "HH:MM"),
    ({"max_deferral_minutes": -5}, "max_deferral_minutes", "greater than or equal to 0"),
    ({"runtime": {"p50_minutes": 30, "p95_minutes": 20}}, "runtime", "p95_minutes 20 is below p50_minutes 30"),
    ({"runtime": {"p50_minutes": 0, "p95_minutes": 20}}, "runtime.p50_minutes", "greater than 0"),
    ({"energy_kwh": -1}, "energy_kwh", "greater than 0"),
    ({"residency": []}, "residency", "at least 1"),
    ({"home_region": "r2"}, "home_region", "'r2' is not in residency"),
    ({"home_region": ""}, "home_region", "at least 1 character"),
    ({"residency": ["r1", ""]}, "residency.1", "at least 1 character"),
    ({"max_deferral_minutes": True}, "max_deferral_minutes", "valid integer"),  # YAML `yes` is not 1 minute
    ({"max_deferral_minutes": "240"}, "max_deferral_minutes", "valid integer"),
    ({"energy_kwh": float("inf")}, "energy_kwh", "finite"),
    ({"energy_kwh": True}, "energy_kwh", "valid number"),
    ({"runtime": {"p50_minutes": 10, "p95_minutes": float("inf")}}, "runtime.p95_minutes", "finite"),
    ({"max_cost": float("nan")}, "max_cost", "finite"),
    ({"allow_region_move": "yes"}, "allow_region_move", "valid boolean"),
    ({"recovery_to_home": 1}, "recovery_to_home", "valid boolean"),
    ({"service": ""}, "service", "at least 1 character"),
    ({"accelerator": ""}, "accelerator", "at least 1 character"),
    ({"input_data_regions": [7]}, "input_data_regions.0", "valid string"),
    ({"checkpoint": "sometimes"}, "checkpoint", "required"),
    ({"cancellation": "maybe"}, "cancellation", "unsafe"),
    ({"fallback": "never"}, "fallback", "run_by_deadline"),
    ({"carbon_policy": "greenest"}, "carbon_policy", "prefer_lower_intensity"),
    ({"name": "Bad Name"}, "name", "lower-case"),
    ({"deadlne": "06:00"}, "deadlne", "unknown field"),
])
def test_every_field_error_names_the_field(change: dict, field: str, words: str) -> None:
    with pytest.raises(ContractError) as err:
        parse_contract({**BASE, **change})
    assert f"field `{field}`" in str(err.value) and words in str(err.value), str(err.value)


def test_missing_fields_are_named_and_energy_or_service_required() -> None:
    data = {k: v for k, v in BASE.items() if k not in ("runtime", "home_region")}
    msg = str(pytest.raises(ContractError, parse_contract, data).value)
    assert "field `runtime`: required" in msg and "field `home_region`: required" in msg
    no_energy = {k: v for k, v in BASE.items() if k != "energy_kwh"}
    assert "field `energy_kwh`: give energy_kwh" in str(pytest.raises(ContractError, parse_contract, no_energy).value)
    assert parse_contract({**no_energy, "service": "reindexer"}).service == "reindexer"
    assert "field `deadline`: a 'flexible' job needs a deadline" in str(
        pytest.raises(ContractError, parse_contract, {**BASE, "deadline": None}).value)


def test_without_max_deferral_a_contract_never_waits() -> None:
    c = parse_contract({k: v for k, v in BASE.items() if k != "max_deferral_minutes"})
    w = window(c, ms("2026-03-01T01:00:00+00:00"))
    assert not c.may_wait and w.earliest == w.latest_start == w.submit


def test_checkpoint_none_or_cancellation_unsafe_forbids_pausing_and_moving() -> None:
    assert not parse_contract({**BASE, "checkpoint": "none", "cancellation": "safe"}).may_pause_or_move
    assert not parse_contract({**BASE, "checkpoint": "required", "cancellation": "unsafe"}).may_pause_or_move
    assert parse_contract({**BASE, "checkpoint": "optional", "cancellation": "safe"}).may_pause_or_move


def test_many_contracts_list_form_and_duplicate_names(tmp_path: Path) -> None:
    f = tmp_path / "many.yaml"
    f.write_text(ISSUE_EXAMPLE + "---\n" + json.dumps({"workload_contracts": [{**BASE, "name": "a"},
                                                                             {**BASE, "name": "b"}]}))
    assert sorted(load_contracts(f)) == ["a", "b", "nightly-search-reindex"]
    f.write_text(json.dumps({"workload_contracts": [{**BASE, "name": "a"}, {**BASE, "name": "a"}]}))
    assert "appears twice" in str(pytest.raises(ContractError, load_contracts, f).value)


def test_kubernetes_annotation_value_and_job_list(tmp_path: Path) -> None:
    value = ISSUE_EXAMPLE
    assert from_annotation(value).name == "nightly-search-reindex"
    assert from_annotation(json.dumps(BASE)).name == "j"  # JSON, no wrapper
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "reindex", "annotations": {ANNOTATION: value}}}
    f = tmp_path / "jobs.yaml"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}))
    assert list(load_contracts(f)) == ["nightly-search-reindex"]
    bad = {**job, "metadata": {"name": "x", "annotations": {ANNOTATION: json.dumps({**BASE, "class": "?"})}}}
    f.write_text(json.dumps(bad))
    msg = str(pytest.raises(ContractError, load_contracts, f).value)
    assert "Job x annotation carbonspan.io/workload-contract" in msg and "field `class`" in msg


def test_seoul_window_in_local_time() -> None:
    f = parse_contract(from_annotation(ISSUE_EXAMPLE).model_dump(by_alias=True))
    # submitted 23:30 KST (14:30 UTC): window opens 00:00 KST (15:00 UTC), deadline 06:00 KST (21:00 UTC)
    w = window(f, ms("2026-03-01T14:30:00+00:00"))
    assert w.earliest == ms("2026-03-01T15:00:00+00:00")
    assert w.deadline == ms("2026-03-01T21:00:00+00:00")
    assert w.latest_start == ms("2026-03-01T18:30:00+00:00")  # 240 minutes after submission
    # submitted 01:00 KST: the window is open already, the deadline is the same morning
    w = window(f, ms("2026-03-01T16:00:00+00:00"))
    assert (w.earliest, w.deadline) == (ms("2026-03-01T16:00:00+00:00"), ms("2026-03-01T21:00:00+00:00"))
    assert local_day(f, ms("2026-03-01T14:59:00+00:00")) == "2026-03-01"
    assert local_day(f, ms("2026-03-01T15:00:00+00:00")) == "2026-03-02"


def test_dst_and_rfc3339_instants() -> None:
    c = parse_contract({**BASE, "timezone": "Europe/London", "deadline": "06:00", "earliest_start": "01:00"})
    # 2026-03-29: clocks go forward at 01:00 GMT; 06:00 local is 05:00 UTC that day
    w = window(c, ms("2026-03-28T23:30:00+00:00"))
    assert w.deadline == ms("2026-03-29T05:00:00+00:00")
    c = parse_contract({**BASE, "deadline": "2026-03-01T06:00:00+09:00", "earliest_start": "2026-03-01T00:00:00Z"})
    w = window(c, ms("2026-02-28T20:00:00+00:00"))
    assert (w.earliest, w.deadline) == (ms("2026-03-01T00:00:00+00:00"), ms("2026-02-28T21:00:00+00:00"))
    assert datetime.fromtimestamp(w.deadline / 1000, UTC).hour == 21
