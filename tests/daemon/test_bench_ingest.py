"""The ingest bench's honest load: fresh trace ids per request, services scenarios, the
trivial-handler ceiling (a short real run of each, on loopback)."""

from __future__ import annotations

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.bench_ingest import FreshIds, _json_bodies, _trace_ids, ceiling, run
from bench.workload import make_request, make_request_bytes


def _spans(raw: bytes) -> list:
    req = ExportTraceServiceRequest.FromString(raw)
    return [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def test_fresh_ids_give_every_request_new_traces_and_change_nothing_else() -> None:
    template = make_request_bytes(512, seed=3, services=10)
    fresh = FreshIds(template, _trace_ids(10, 3), as_hex=False)
    a, b = fresh(), fresh()
    old = [s.trace_id for s in _spans(template)]
    ids_a, ids_b = [s.trace_id for s in _spans(a)], [s.trace_id for s in _spans(b)]
    assert len(set(ids_a)) == len(set(old)) == 64  # a trace is ~8 spans: as many traces
    assert not set(ids_a) & set(ids_b) and not set(ids_a) & set(old)
    pairs = dict(zip(old, ids_a, strict=True))  # spans of one trace keep one (new) id
    assert all(pairs[o] == n for o, n in zip(old, ids_a, strict=True))
    stripped, base = _spans(a), _spans(template)
    for s in stripped + base:
        s.trace_id = b""
    assert [s.SerializeToString() for s in stripped] == [s.SerializeToString() for s in base]


def test_fresh_ids_in_json_bodies_are_hex_and_new() -> None:
    body = _json_bodies(10)[0]
    doc = orjson.loads(FreshIds(body, _trace_ids(10, 0), as_hex=True)())
    ids = {s["traceId"] for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]
           for s in ss["spans"]}
    assert len(ids) == 64 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert not ids & {t.hex() for t in _trace_ids(10, 0)}


def test_a_services_scenario_spreads_spans_over_that_many_services() -> None:
    names = {rs.resource.attributes[0].value.string_value
             for rs in make_request(512, seed=1, services=10_000).resource_spans}
    assert len(names) > 400 and all(n.startswith("svc-") for n in names)
    assert make_request_bytes(512, seed=1) == make_request_bytes(512, seed=1)  # seeded


def test_a_short_run_and_its_ceiling_report_fresh_ids_cpu_and_no_loss() -> None:
    r = run(seconds=1.0, clients=2, warmup=0.5, services=1000)
    assert r["fresh_ids"] and r["services"] == 1000
    assert r["acked_spans"] == r["archived_spans"] > 0 and r["agent_cpu_s_per_million"] > 0
    c = ceiling(seconds=1.0, clients=2, warmup=0.5, http_json=True)
    assert c["failed_requests"] == 0 and c["spans_per_s"] > 0
    assert c["server_cpu_s_per_million"] > 0


def test_a_short_http_protobuf_run_and_its_ceiling() -> None:
    """``--http-proto``: the gRPC bodies POSTed as application/x-protobuf, with a ceiling of
    its own (the trivial handler answers protobuf in kind)."""
    r = run(seconds=1.0, clients=2, warmup=0.5, http_proto=True)
    assert r["transport"] == "http-proto" and r["failed_requests"] == 0
    assert r["acked_spans"] == r["archived_spans"] > 0 and r["exit_code"] == 0
    c = ceiling(seconds=1.0, clients=2, warmup=0.5, http_proto=True)
    assert c["transport"] == "http-proto" and c["failed_requests"] == 0 and c["spans_per_s"] > 0


def test_a_short_run_with_two_workers_counts_every_process_and_chain() -> None:
    r = run(seconds=1.0, clients=4, warmup=0.5, workers=2, http_json=True)
    assert r["workers"] == 2 and r["failed_requests"] == 0
    assert r["acked_spans"] == r["archived_spans"] > 0 and r["exit_code"] == 0
    assert r["agent_cpu_s_per_million"] > 0 and 0 < r["peak_rss_mb"] < 250
    # a gRPC channel per client thread is a connection each: the kernel spreads them (all 16
    # on one worker: odds 2 in 65,536)
    g = run(seconds=1.0, clients=16, warmup=0.5, workers=2, channels=16)
    assert g["channels"] == 16 and g["acked_spans"] == g["archived_spans"] > 0
    assert set(g["chain_spans"]) == {"bench-w0", "bench-w1"}
    assert all(n > 0 for n in g["chain_spans"].values()), g["chain_spans"]
