"""Contract facts decided once in ``schema/`` (issue 18, item 2; DESIGN.md, "The house"):
the archive layout (``schema.archive``), the window time format (``schema.times``) and the
terms of a carbon total (``schema.totals``).

Two kinds of test: the two ends agree (the agent's real writer writes files every reader finds
and reads line for line alike; a window time round-trips through the agent's formatter and
every parser; the agent's window total, ``verify`` and the report's total are one sum), and
no second copy reappears (a scan of the code's syntax for a window file name, the body key, the
window time format or a sum of total terms written anywhere but ``schema/``).
"""

from __future__ import annotations

import ast
import gzip
import sys
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.grades import archive_files, estimate_service
from agent.archive import ArchiveWriter, read_records
from agent.sources.calibrate import window_files as calibrate_files
from aggregator import synth
from aggregator.engines import run_local
from aggregator.files import discover, iter_lines
from aggregator.read import Period, window_start
from aggregator.report import build_report
from aggregator.verify import window_findings
from aggregator.verify_lines import read_records as verify_records
from scheduling.archive_energy import read_archives
from schema import archive, times, totals
from schema.models import Co2
from schema.report import CarbonBreakdown

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 30, 23, 59, tzinfo=UTC)


def _agent_archive(root: Path) -> Path:
    """A chain written by the agent's real writer: rotated by size, compressed on rotation,
    and a blank line put before the first line of the last file (a reader skips it but counts
    it: that record is line 2)."""
    directory = root / "node-a"
    writer = ArchiveWriter(directory, max_size_mb=0.004, compress=True)
    writer.open()
    svcs = [synth.Svc("api", energy_kwh=2e-5), synth.Svc("db", region="pl", energy_kwh=1e-5)]
    for i in range(6):
        start = T0 + timedelta(minutes=i)
        body = synth.window_report(start, svcs, agent_id="node-a").model_dump(mode="json")
        writer.append(body, times.format_datetime(start + timedelta(minutes=1)))
    writer.close()
    last = archive.window_files(directory)[-1]
    assert not archive.is_gzip(last.name)
    last.write_bytes(b"  \n" + last.read_bytes())
    return directory


def test_every_reader_finds_the_agents_files_in_one_order(tmp_path: Path) -> None:
    directory = _agent_archive(tmp_path)
    names = sorted(p.name for p in directory.iterdir() if archive.AGENT_FILE_RE.match(p.name))
    assert len(names) >= 3 and any(archive.is_gzip(n) for n in names)  # rotated and compressed
    assert all(archive.is_window_file(n) for n in names)
    assert not any(archive.is_window_file(n) for n in ("agent.wal", "agent.wal.void", "agent.lock",
                                                       "checkpoints.log"))
    want = archive.window_files(directory)
    assert [p.name for p in want] == names  # lexical = write order; no twins here
    assert [f.name for f in discover([str(tmp_path)])] == names  # the aggregator
    assert archive_files(tmp_path) == want  # admission's grades
    assert calibrate_files(tmp_path) == want  # calibration
    chains = read_archives(tmp_path)  # the scheduler's energy from archives
    assert list(chains) == ["node-a"] and chains["node-a"].lines == 6


def test_a_gzip_twin_is_skipped_by_every_reader(tmp_path: Path) -> None:
    directory = _agent_archive(tmp_path)
    plain = next(p for p in archive.window_files(directory) if not archive.is_gzip(p.name))
    twin = plain.with_name(plain.name + archive.GZIP_SUFFIX)  # a compression in progress
    twin.write_bytes(gzip.compress(plain.read_bytes()))
    want = [p for p in archive.window_files(directory)]
    assert twin not in want and plain in want
    assert [f.name for f in discover([str(tmp_path)])] == [p.name for p in want]
    assert archive_files(tmp_path) == want == calibrate_files(tmp_path)
    assert estimate_service(tmp_path, "api").windows == 6  # no window counted twice


def test_the_agent_and_the_aggregator_read_the_same_lines_at_the_same_numbers(tmp_path: Path) -> None:
    directory = _agent_archive(tmp_path)
    agent_side = read_records(directory)
    files = discover([str(tmp_path)])
    found: list = []
    aggregator_side = list(verify_records(files, found, {}))
    assert [loc for loc, _ in agent_side] == [loc.split("/", 1)[1] for loc, _ in aggregator_side]
    assert [rec for _, rec in agent_side] == [rec for _, rec in aggregator_side]
    assert found == [] and all(rec is not None and archive.RECORD_KEYS <= rec.keys() for _, rec in agent_side)
    last = archive.window_files(directory)[-1].name
    assert [loc for loc, _ in agent_side if loc.startswith(last)][0] == f"{last}:2"  # the blank counted
    for f in files:  # the aggregator's reader yields exactly the schema reader's lines
        path = Path(f.url)
        assert [line.rstrip(b"\n") for line in iter_lines(f) if line.strip()] == \
            [line for _, line in archive.numbered_lines(path)]


def test_the_body_key_is_where_the_aggregator_reads_the_window(tmp_path: Path) -> None:
    directory = _agent_archive(tmp_path)
    records = [rec for _, rec in read_records(directory)]
    assert all(set(rec) == archive.RECORD_KEYS for rec in records)
    starts = [window_start(rec) for rec in records]
    assert starts == [(T0 + timedelta(minutes=i)).timestamp() for i in range(6)]
    state = run_local(discover([str(tmp_path)]), Period.everything())
    assert state.windows == 6 and state.malformed == 0


WINDOW_NS = st.integers(0, 7_258_118_399_999_999_000).map(lambda ns: ns // 1000 * 1000)  # to 2199


@given(WINDOW_NS)
def test_a_window_time_round_trips_through_every_parser(ns: int) -> None:
    text = times.format_ns(ns)
    assert len(text) == times.WINDOW_TIME_LENGTH and text.endswith("Z")
    assert text == datetime.fromtimestamp(ns // 10**9, UTC).replace(microsecond=ns % 10**9 // 1000).strftime(
        times.WINDOW_TIME_FORMAT)
    assert times.to_ns(text) == ns
    epoch = times.to_epoch(text)
    assert epoch == datetime.fromisoformat(text).timestamp()
    assert window_start({archive.BODY_KEY: {"window": {"start": text}}}) == epoch  # the aggregator
    assert times.utc_day(text) == text[:10].replace("-", "")
    whole = times.period_label(float(ns // 10**9))
    assert times.to_epoch(whole) == float(ns // 10**9) and len(whole) == 20  # a report label


def test_the_short_form_older_lines_carry_reads_as_the_same_time() -> None:
    assert times.to_epoch("2026-11-01T00:00:00Z") == times.to_epoch("2026-11-01T00:00:00.000000Z")
    assert times.to_epoch("2026-11-01T00:00:00") == times.to_epoch("2026-11-01T00:00:00Z")  # no offset: UTC
    assert window_start({archive.BODY_KEY: {"window": {"start": "2026-11-01T00:00:00Z"}}}) == \
        times.to_epoch("2026-11-01T00:00:00.000000Z")


NEAR_FORMS = ["2026-11-01T00:00:00Z", "2026-11-01T23:59:59.999999Z", "1970-01-01T00:00:00.000001Z",
              "1969-12-31T23:59:59.999999Z", "2026-W44-7T10:00:00Z", "2026-11-01T24:00:00Z",
              "2026-11-01T10:60:00Z", "2026-11-01T10:00:60Z", "2026-11-01T10:00:00z", "2026-11-01t10:00:00Z",
              "2026-11-01T10:00:00.00000٣Z", "2026-11-01T10:00:00,000000Z", "2026-11-01T10:00:00.0000001",
              "2026-02-29T10:00:00Z", "2024-02-29T10:00:00.500000Z", "0001-01-01T00:00:00Z",
              "9999-12-31T23:59:59.999999Z", "2026-11-01 10:00:00.000000Z", "2026-11-01T10:00:00+00:00",
              "2026-11-01T1a:00:00Z", "+026-11-01T10:00:00Z"]


@given(st.one_of(WINDOW_NS.map(times.format_ns), WINDOW_NS.map(lambda ns: times.period_label(ns // 10**9)),
                 st.sampled_from(NEAR_FORMS),
                 st.text("0123456789-T:.Z+ zW٣", min_size=19, max_size=28)))
def test_the_fast_read_of_the_usual_forms_is_the_parse(text: str) -> None:
    """to_epoch reads the window time and the 20-character form without a parse; on every text
    it gives what the parse gives, or refuses as the parse does."""
    try:
        want: float | None = times.parse(text).timestamp()
    except ValueError:
        want = None
    for _ in range(2):  # the hour parsed, then cached
        try:
            got: float | None = times.to_epoch(text)
        except ValueError:
            got = None
        assert got == want, text


def test_the_folds_sums_hold_every_term() -> None:
    """The state, each time bucket and the backfill totals keep one running sum per term of a
    total, summed by the fold over the contract's terms (a term added to schema.totals that
    the fold does not hold fails here)."""
    from aggregator.fold.state import _SUMMED, AggregateState
    from aggregator.fold.sums import _BACKFILL_FIELDS, _BUCKET_FIELDS, BackfillTotals, Bucket

    kg = {term + "_kg" for term in totals.TOTAL_TERMS}
    assert kg <= {f.name for f in fields(AggregateState)} and kg <= set(_SUMMED)
    assert kg <= {f.name for f in fields(BackfillTotals)} and kg <= set(_BACKFILL_FIELDS)
    assert set(totals.TOTAL_TERMS) <= set(_BUCKET_FIELDS) and all(hasattr(Bucket(), t) for t in totals.TOTAL_TERMS)
    assert totals.less_unattributed(10.0, 1.0, 2.0, 3.0) == 10.0 - 1.0 - 2.0 - 3.0
    with pytest.raises(TypeError):
        totals.less_unattributed(10.0, 1.0, 2.0)


def test_the_total_terms_are_the_models_fields() -> None:
    """The window line's ``co2`` object and the report's breakdown name the same terms."""
    line_terms = tuple(name[: -len("_gco2")] for name in Co2.model_fields if name.endswith("_gco2"))
    report_terms = tuple(name[: -len("_kgco2eq")] for name in CarbonBreakdown.model_fields)
    assert line_terms == report_terms == totals.TOTAL_TERMS
    assert set(totals.SCOPE2_TERMS) | set(totals.UNATTRIBUTED_TERMS) == set(totals.TOTAL_TERMS)
    with pytest.raises(TypeError):
        totals.carbon_total(1.0, 2.0, 3.0)  # a term left out is refused, never summed silently


def _agent_window(start_ns: int) -> dict:
    """One window body as the agent builds it (decode, score, report), with every total term
    in play: embodied carbon per trace and a database and a broker host in totals."""
    from agent.config import parse_green
    from agent.otlp import decode_protobuf
    from agent.score import ScoringContext, score_batch
    from agent.window import build_report as build_window
    if str(ROOT) not in sys.path:  # bench is not an installed package
        sys.path.append(str(ROOT))
    from bench.workload import make_request

    green = parse_green({"embodied_carbon_per_request_gco2": 0.5, "hosts": [
        {"name": "pg", "kind": "database", "region": "pl", "watts": 120},
        {"name": "mq", "kind": "messaging", "region": "eu-west-3", "watts": 40}]})
    ctx = ScoringContext.from_config(green, now_ns=start_ns + 60 * 10**9)
    batch = decode_protobuf(make_request(n_spans=64, seed=3).SerializeToString())
    return build_window(score_batch(batch, ctx), ctx, start_ns, start_ns + 60 * 10**9,
                        agent_id="node-a").model_dump(mode="json")


def test_the_agent_the_verifier_and_the_report_sum_one_total(tmp_path: Path) -> None:
    report = _agent_window(int(T0.timestamp()) * 10**9)
    co2 = report["green_summary"]["co2"]
    assert all(v > 0 for v in totals.line_terms(co2))  # every term is in play
    assert co2["total"]["mid"] == totals.carbon_total(*totals.line_terms(co2))  # the agent's sum
    rec = {"ts": times.now(), "seq": 0, "prev": "", "hash": "", archive.BODY_KEY: report}
    assert [f.kind for f in window_findings("x:1", rec)] == []  # verify: the same sum
    bad = orjson.loads(orjson.dumps(rec))
    bad[archive.BODY_KEY]["green_summary"]["co2"]["total"]["mid"] *= 1.01
    assert [f.kind for f in window_findings("x:1", bad)] == ["total_invariant"]
    synth.write_agent(tmp_path, "node-a", [synth.sealed_lines([report])])
    state = run_local(discover([str(tmp_path)]), Period.everything())
    agg = build_report(state, Period.everything()).aggregate
    assert agg.total_carbon_kgco2eq == totals.total_of(agg.carbon_breakdown, "_kgco2eq")
    assert agg.total_carbon_kgco2eq == pytest.approx(co2["total"]["mid"] / 1000, rel=1e-12)
    for term, kg in zip(totals.TOTAL_TERMS, totals.terms_of(agg.carbon_breakdown, "_kgco2eq"), strict=True):
        assert kg == pytest.approx(co2[f"{term}_gco2"] / 1000, rel=1e-12)  # each term lands in its row


# -- no second copy ------------------------------------------------------------------------

DEFINING = {"schema/archive.py", "schema/times.py", "schema/totals.py"}
#: The one copy left in Python: the fallback of the C accumulators' fields without the build
#: (the C struct BucketSums in _fold.c fixes them; docs/archive-format.md, "Where the facts live").
TERM_LIST_ALLOWED = {"aggregator/fold/ext.py"}
PACKAGES = ("agent", "aggregator", "admission", "scheduling", "placement", "witness", "bench", "carbonspan",
            "httpserve", "schema", "deploy")
TERMS = set(totals.TOTAL_TERMS)


def _term(node: ast.expr) -> str | None:
    """The total term an operand names (``state.embodied_kg``, ``operational_g``), if any."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    head = name.split("_")[0]
    return head if head in TERMS else None


def _operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        return _operands(node.left) + _operands(node.right)
    return [node]


def _copies(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "%H:%M:%S.%f" in node.value:
                out.append((node.lineno, "the window time format (schema.times)"))
            if node.value.startswith("windows-") and ("*" in node.value or "{" in node.value):
                out.append((node.lineno, "a window file name pattern (schema.archive)"))
            if "^windows-" in node.value or r"\.jsonl(" in node.value:
                out.append((node.lineno, "a window file regex (schema.archive)"))
        elif isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if parts and parts[0].startswith("windows-") and any(".jsonl" in p for p in parts):
                out.append((node.lineno, "a window file name (schema.archive.window_file_name)"))
            specs = [v.format_spec for v in node.values if isinstance(v, ast.FormattedValue) and v.format_spec]
            if any("%H:%M:%S" in ast.unparse(s) for s in specs) and "".join(parts).endswith("Z"):
                out.append((node.lineno, "the window time format (schema.times.format_ns)"))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "report":
            out.append((node.lineno, "the body key (schema.archive.BODY_KEY)"))
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("get", "seal") and any(isinstance(a, ast.Constant) and a.value == "report" for a in node.args):
                out.append((node.lineno, "the body key (schema.archive.BODY_KEY)"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
            if len({_term(o) for o in _operands(node)} - {None}) >= 2:
                out.append((node.lineno, "a sum of total terms (schema.totals)"))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            named = {_term(ast.Name(e.value)) for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is str}
            if len(named - {None}) >= 3:
                out.append((node.lineno, "a list of the total terms (schema.totals.TOTAL_TERMS)"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            added: dict[str, int] = {}  # term -> first line adding to an accumulator of it
            for inner in ast.walk(node):
                if isinstance(inner, ast.AugAssign) and isinstance(inner.op, ast.Add | ast.Sub):
                    term = _term(inner.target)
                    if term is not None:
                        added.setdefault(term, inner.lineno)
            if len(added) >= 2:
                out.append((min(added.values()), "an addition written per total term (loop over schema.totals)"))
    return out


def test_no_second_copy_of_a_contract_fact() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in DEFINING:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            found += [f"{rel}:{line}: {what}" for line, what in sorted(set(_copies(tree)))
                      if not (rel in TERM_LIST_ALLOWED and what.startswith("a list of the total terms"))]
    assert found == [], "decide these in schema/ and import them:\n" + "\n".join(found)


def test_the_scan_sees_each_kind_of_copy() -> None:
    """The scanner itself: each copy this file forbids is caught when written."""
    source = '''
f"windows-{day}-{n:06d}.jsonl"
p.glob("windows-*.jsonl")
re.compile(r"^windows-(\\d{8})")
rec["report"]
rec.get("report")
seal(prev, seq, ts, "report", body)
t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
f"{dt:%Y-%m-%dT%H:%M:%S}.{us:06d}Z"
mid = operational + embodied + database_g + messaging_g
app = w.mid_g - w.embodied_g - w.database_g
def add(state, w):
    state.embodied_kg += w.embodied_g
    state.database_kg += w.database_g
for term in ("operational", "embodied", "database", "messaging"): pass
'''
    lines = {line for line, _ in _copies(ast.parse(source))}
    assert lines == set(range(2, 12)) | {13, 15}, sorted(lines)
