"""Lines every reader must survive (issue 11 item 4, issue 12 items 7, 8, 11): non-finite numbers,
deep nesting, lines past MAX_LINE_BYTES, duplicate keys. aggregate and verify each read them
the way docs/archive-format.md ("What readers do with a bad line") says."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import files, synth
from aggregator.engines import fold_lines, run_local
from aggregator.files import LongLine, discover
from aggregator.fold.reference import fold_line as fold_line_reference
from aggregator.read import Period
from aggregator.report import build_report, report_bytes
from aggregator.verify import verify_archives
from schema import archive
from schema.canonical import canonical_json
from schema.constants import MAX_LINE_BYTES

T0 = datetime(2026, 11, 10, tzinfo=UTC)
NAME = "windows-20261110-000000.jsonl"


def _records(n: int = 3) -> list[dict]:
    return synth.sealed_lines(synth.realistic(n, seed=5, n_services=3, start=T0))


def _write(root: Path, lines: list[bytes], name: str = NAME) -> Path:
    path = root / "agent-a" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(line + b"\n" for line in lines)
    path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    return path


def _report(root: Path, **kw) -> dict:
    state = run_local(discover([str(root)]), Period.everything())
    return build_report(state, Period.everything()).model_dump(mode="json")


def _kinds(root: Path) -> list[tuple[str, str, str]]:
    findings, _ = verify_archives(discover([str(root)]))
    return [(f.location.rsplit(":", 1)[-1], f.kind, f.message) for f in findings]


# -- NaN, Infinity, overflow: numbers, sanitised to 0 and counted --------------------------------

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400]


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_non_finite_figure_is_sanitised_and_the_rest_of_the_window_kept(tmp_path, literal):
    recs = _records()
    clean = _report(_write(tmp_path / "clean", [orjson.dumps(r) for r in recs]).parents[1])
    gs = recs[1]["report"]["green_summary"]
    first = next(iter(gs["per_service_carbon_kgco2eq"]))
    lost_kg = gs["per_service_carbon_kgco2eq"][first]
    gs["per_service_carbon_kgco2eq"][first] = "SENTINEL"
    # Python's json.dumps writes NaN/Infinity literals by default; the sentinel becomes one
    text = json.dumps(recs[1]).replace('"SENTINEL"', literal).encode()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)  # what made the whole window a malformed line before
    root = tmp_path / "hostile"
    _write(root, [orjson.dumps(recs[0]), text, orjson.dumps(recs[2])])
    got = _report(root)
    assert got["inputs"]["malformed_lines"] == 0 and got["aggregate"]["windows"] == 3
    assert got["aggregate"]["sanitised_values"] == 1
    # every other figure of the window counts: only the one sanitised value is missing
    want = clean["aggregate"]["total_carbon_kgco2eq"] - lost_kg
    assert got["aggregate"]["total_carbon_kgco2eq"] == pytest.approx(want, rel=1e-12)
    assert got["aggregate"]["total_energy_kwh"] == pytest.approx(clean["aggregate"]["total_energy_kwh"], rel=1e-12)


def test_the_accelerated_fold_and_the_reference_agree_on_sanitised_lines(tmp_path):
    """Sanitised values (NaN read as 0.0, counted) give the same report on both folds."""
    recs = _records(6)
    lines = []
    for i, r in enumerate(recs):
        gs = r["report"]["green_summary"]
        if i % 2:
            for key in ("energy_kwh",):
                gs[key] = "SENTINEL"
            name = next(iter(gs["per_service_energy_kwh"]))
            gs["per_service_energy_kwh"][name] = "SENTINEL"
        lines.append(json.dumps(r).replace('"SENTINEL"', "NaN").encode() + b"\n")
    period = Period.everything()
    ref, _ = fold_lines(lines, "agent-a/x.jsonl", "agent-a", period, fold=fold_line_reference)
    got, _ = fold_lines(lines, "agent-a/x.jsonl", "agent-a", period)
    assert got.tally.sanitised == ref.tally.sanitised == 6 and got.malformed == 0
    assert report_bytes(build_report(got, period)) == report_bytes(build_report(ref, period))


@pytest.mark.parametrize("line", [
    b'{"report": {"window": {"start": "2026-11-10T00:00:00Z"}, "green_summary": {"energy_kwh": NaN}',  # cut
    b'{"report": NaN}',  # a window that is not an object
    b'[NaN]',
    b'{"report": {"window": {"start": "2026-11-10T00:00:00Z"}}, "x": nan}',  # lower-case: not JSON
    b'{"a": "\\ud800", "b": NaN}',  # a lone surrogate: orjson refuses it, so does the tolerant parse
    b'\xff{"b": NaN}',
])
def test_structurally_broken_lines_stay_malformed(tmp_path, line):
    root = tmp_path / "a"
    _write(root, [line, orjson.dumps(_records(1)[0])])
    got = _report(root)
    assert got["inputs"]["malformed_lines"] == 1 and got["aggregate"]["windows"] == 1
    assert got["aggregate"]["sanitised_values"] == 0


def test_verify_names_a_non_finite_number_and_keeps_the_chain(tmp_path):
    recs = _records()
    text = json.dumps(recs[1]).replace(json.dumps(recs[1]["report"]["window"]["traces"]), "NaN", 1)
    _write(tmp_path, [orjson.dumps(recs[0]), text.encode(), orjson.dumps(recs[2])])
    kinds = _kinds(tmp_path)
    assert ("2", "non_finite_number") in [(line, kind) for line, kind, _ in kinds]
    assert all(line == "2" for line, _, _ in kinds)  # line 3 still follows line 2: no cascade


# -- deep nesting: a finding, never a crash --------------------------------------------------------

def _deep(rec: dict, depth: int = 1000) -> bytes:
    rec = json.loads(json.dumps(rec))
    rec["report"]["methodology"]["deep"] = "SENTINEL"
    return orjson.dumps(rec).replace(b'"SENTINEL"', b"[" * depth + b"]" * depth)


def test_canonical_json_refuses_deep_nesting_with_a_value_error():
    deep = orjson.loads(b"[" * 1000 + b"]" * 1000)
    with pytest.raises(ValueError, match="nested deeper than 254 levels"):
        canonical_json({"a": deep})


def test_verify_reports_a_deep_line_as_a_finding(tmp_path, capsys):
    from carbonspan.cli import main

    recs = _records()
    _write(tmp_path, [orjson.dumps(recs[0]), _deep(recs[1]), orjson.dumps(recs[2])])
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "agent-a/" + NAME + ":2: malformed: nested deeper than 254 levels" in out


def test_aggregate_reads_a_deep_line_without_crashing(tmp_path):
    recs = _records()
    _write(tmp_path, [orjson.dumps(recs[0]), _deep(recs[1]), _deep(recs[2], 1100)])
    got = _report(tmp_path)
    assert got["aggregate"]["windows"] == 2 and got["inputs"]["malformed_lines"] == 1
    assert "nested too deeply" in got["inputs"]["malformed_samples"][0]


# -- lines past MAX_LINE_BYTES: malformed, counted, skipped to the next newline ----------------------

@pytest.mark.parametrize("name", [NAME, NAME + ".gz"])
def test_a_line_past_the_limit_is_malformed_and_the_next_line_is_read(tmp_path, name):
    recs = _records()
    long = b'{"pad":"' + b"x" * MAX_LINE_BYTES + b'"}'
    _write(tmp_path, [orjson.dumps(recs[0]), long, orjson.dumps(recs[1])], name)
    got = _report(tmp_path)
    assert got["aggregate"]["windows"] == 2 and got["inputs"]["malformed_lines"] == 1
    sample = got["inputs"]["malformed_samples"][0]
    assert f":2: line of {len(long):,} bytes is longer than the {MAX_LINE_BYTES:,}-byte limit" in sample
    kinds = _kinds(tmp_path)
    assert ("2", "malformed") in [(line, kind) for line, kind, _ in kinds]
    assert any("longer than the" in message for _, _, message in kinds)


LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@settings(max_examples=150, deadline=None)
@given(LINES, st.booleans(), st.booleans(), st.sampled_from([1, 3, 7, 64]), st.sampled_from([4, 9, 25]))
def test_line_views_cut_every_long_line_and_keep_every_other(tmp_path_factory, lines, newline_at_end,
                                                            gz, chunk, limit):
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    root = tmp_path_factory.mktemp("v")
    path = root / ("w.jsonl.gz" if gz else "w.jsonl")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    f = discover([str(path)])[0]
    saved = archive.CHUNK_PLAIN, archive.CHUNK_GZIP  # the read sizes are schema.archive's
    archive.CHUNK_PLAIN = archive.CHUNK_GZIP = chunk
    try:
        got = [("long", v.length) if type(v) is LongLine else bytes(v) for v in files.iter_line_views(f, limit)]
    finally:
        archive.CHUNK_PLAIN, archive.CHUNK_GZIP = saved
    want = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if last and not line and not newline_at_end:
            continue
        full = line + (b"" if last and not newline_at_end else b"\n")
        want.append(("long", len(line)) if len(line) > limit else full)
    assert got == want


# -- duplicate keys ---------------------------------------------------------------------------------

def _duplicated(rec: dict) -> bytes:
    """The sealed line with a second ``energy_kwh`` in green_summary *before* the real one:
    orjson and Python read the last (so the hash and every invariant hold), a first-wins reader
    reads ten times the energy."""
    real = rec["report"]["green_summary"]["energy_kwh"]
    line = orjson.dumps(rec)
    marker = b'"energy_kwh":' + orjson.dumps(real)
    assert line.count(marker) == 1
    return line.replace(marker, b'"energy_kwh":' + orjson.dumps(real * 10) + b"," + marker)


def test_verify_refuses_a_duplicate_key_whose_hash_verifies(tmp_path):
    recs = _records()
    _write(tmp_path, [orjson.dumps(recs[0]), _duplicated(recs[1])])
    kinds = _kinds(tmp_path)
    assert [(line, kind) for line, kind, _ in kinds] == [("2", "duplicate_key")]
    assert "'energy_kwh'" in kinds[0][2]


def test_verify_refuses_a_duplicate_key_in_a_line_python_wrote(tmp_path):
    recs = _records()
    text = json.dumps(recs[0]).replace('"seq": 0', '"seq": 0, "seq": 0', 1)
    _write(tmp_path, [text.encode()])
    assert [(line, kind) for line, kind, _ in _kinds(tmp_path)] == [("1", "duplicate_key")]


def test_verify_passes_a_line_python_wrote_without_duplicates(tmp_path):
    _write(tmp_path, [json.dumps(r).encode() for r in _records()])
    assert _kinds(tmp_path) == []


def test_aggregate_refuses_a_duplicate_key_on_the_tolerant_path(tmp_path):
    recs = _records()
    text = json.dumps(recs[1]).replace('"seq": 1', '"seq": NaN, "seq": 1', 1)
    _write(tmp_path, [orjson.dumps(recs[0]), text.encode()])
    got = _report(tmp_path)
    assert got["inputs"]["malformed_lines"] == 1 and "duplicate key 'seq'" in got["inputs"]["malformed_samples"][0]


def test_verify_chain_reports_a_record_it_cannot_hash_instead_of_raising():
    """Every chain reader (audit logs, the test helpers) goes through verify_chain."""
    from schema.chain import verify_chain

    deep = orjson.loads(b'{"ts":"t","seq":0,"prev":"p","hash":"h","event":' + b"[" * 600 + b"]" * 600 + b"}")
    findings, _, count = verify_chain([("log:1", deep)])
    assert count == 1 and [(f.kind, "nested deeper than 254 levels" in f.message) for f in findings] == [("malformed", True)]


def test_aggregate_folds_the_last_value_of_a_duplicate_key_on_the_fast_path(tmp_path):
    """Documented (report-format.md, Sanitising): orjson keeps the last value and so does the
    hash; proving every line free of duplicates would cost another pass over its bytes."""
    recs = _records()
    clean = _report(_write(tmp_path / "clean", [orjson.dumps(r) for r in recs[:2]]).parents[1])
    _write(tmp_path / "dup", [orjson.dumps(recs[0]), _duplicated(recs[1])])
    got = _report(tmp_path / "dup")
    assert got["inputs"]["malformed_lines"] == 0
    assert got["aggregate"]["total_energy_kwh"] == clean["aggregate"]["total_energy_kwh"]


def test_the_agents_largest_line_fits_the_readers_limit():
    """4,096 services (the per-window cap) and 4,095 endpoints, every name at MAX_NAME_BYTES,
    scored and sealed by the agent's own code, is shorter than MAX_LINE_BYTES."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    from agent.config import load_config
    from agent.otlp import decode_protobuf
    from agent.score import ScoringContext, score_batch
    from agent.window import build_report as window_report
    from schema.chain import seal
    from schema.constants import MAX_NAME_BYTES

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    t0 = 1_764_460_800 * 10**9
    request = ExportTraceServiceRequest()
    for i in range(4096):
        span = Span(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                    name=f"GET /api/{i:05d}/".ljust(MAX_NAME_BYTES, "e"), kind=Span.SPAN_KIND_CLIENT,
                    start_time_unix_nano=t0 + 1000, end_time_unix_nano=t0 + 5_000_000,
                    attributes=[kv("db.system", "postgresql"), kv("db.statement", "SELECT 1")])
        request.resource_spans.append(ResourceSpans(
            resource=Resource(attributes=[kv("service.name", f"svc-{i:05d}-".ljust(MAX_NAME_BYTES, "x")),
                                          kv("cloud.region", ("eu-west-3", "us-east-1")[i % 2])]),
            scope_spans=[ScopeSpans(spans=[span])]))
    ctx = ScoringContext.from_config(load_config(None).green)
    report = window_report(score_batch(decode_protobuf(request.SerializeToString()), ctx), ctx, t0,
                           t0 + 60 * 10**9, agent_id="node-a").model_dump(mode="json")
    assert len(report["green_summary"]["per_service_energy_kwh"]) == 4096
    line = orjson.dumps(seal(None, 0, report["window"]["end"], "report", report), option=orjson.OPT_SORT_KEYS)
    assert len(line) < MAX_LINE_BYTES  # 8.5 MiB measured on 2026-12-01 (archive-format.md, Limits)
