"""The ingest bench's honest load: fresh trace ids per request, services scenarios, the
trivial-handler ceiling (a short real run of each, on loopback)."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.bench_ingest import (
    SHAPE_TEMPLATES,
    FreshIds,
    _json_bodies,
    _proto_bodies,
    _trace_ids,
    ceiling,
    own_ratio,
    run,
    shaped,
    window_cardinality,
)
from bench.workload import block_services, make_request, make_request_bytes, services_of


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


def _resources(raw: bytes) -> list[tuple[str, str, int]]:
    """(service.name, cloud.region, spans) of each resource of a request."""
    req = ExportTraceServiceRequest.FromString(raw)
    out = []
    for rs in req.resource_spans:
        attrs = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
        out.append((attrs["service.name"], attrs["cloud.region"],
                    sum(len(ss.spans) for ss in rs.scope_spans)))
    return out


def test_the_default_shape_is_the_gateway_fan_in_one() -> None:
    """--services N alone: each span's service drawn from all N (~500 resources at 10,000)."""
    res = _resources(make_request_bytes(512, seed=2, services=10_000))
    assert len(res) > 400 and sum(n for *_, n in res) == 512
    assert len(_resources(make_request_bytes(512, seed=2, services=10))) == 10


@pytest.mark.parametrize(("services", "k"), [(10_000, 8), (10_000, 1), (10, 8), (1000, 3)])
def test_the_sdk_shape_sends_k_resources_per_request_and_meets_every_service_in_a_cycle(
        services: int, k: int) -> None:
    """--services-per-request K: K resources (distinct services, their own regions) of 512 / K
    spans each, whole traces within one; ceil(N / K) consecutive requests meet all N, whatever
    template a request was patched from, fresh trace ids each time."""
    table = {name: region for name, _, region in services_of(services)}
    every = [name for name, _, _ in services_of(services)]  # once: it builds all N each call
    source = shaped(_proto_bodies(services, k), False, services, k, fresh_ids=True)
    cycle = -(-services // k)
    met: set[str] = set()
    traces: set[bytes] = set()
    for i in range(min(cycle, 1500)):  # K=1 at 10,000: the first 1,500 of its cycle
        raw = source.take(i)
        res = _resources(raw)
        names = [n for n, _, _ in res]
        assert len(res) == k == len(set(names))
        assert names == [every[j] for j in block_services(i, k, services)]
        assert all(table[n] == region for n, region, _ in res)  # a service keeps its region
        assert sorted(n for *_, n in res) == sorted([512 // k + (j < 512 % k) for j in range(k)])
        ids = {s.trace_id for s in _spans(raw)}
        assert not ids & traces
        traces |= ids
        met.update(names)
        for rs in ExportTraceServiceRequest.FromString(raw).resource_spans:  # traces whole
            quoted = {kv.value.string_value for ss in rs.scope_spans for s in ss.spans
                      for kv in s.attributes if kv.key == "code.namespace"}
            assert quoted <= {f"{rs.resource.attributes[0].value.string_value}.views"}
    assert len(met) == min(services, 1500 * k)
    assert SHAPE_TEMPLATES % 5 == 0


def test_the_sdk_shape_in_json_bodies_too() -> None:
    source = shaped(_json_bodies(10_000, 8), True, 10_000, 8, fresh_ids=True)
    for i in range(45):  # the requests in turn: more than the 20 templates
        doc = orjson.loads(source.take(i))
        names = [kv["value"]["stringValue"] for rs in doc["resourceSpans"]
                 for kv in rs["resource"]["attributes"] if kv["key"] == "service.name"]
        assert names == [f"svc-{j:05d}" for j in block_services(i, 8, 10_000)]


def test_the_sdk_shape_refuses_what_it_cannot_patch_consistently() -> None:
    with pytest.raises(ValueError):
        run(seconds=1.0, services=12, per_request=8)  # not a multiple of 5: regions would shift
    with pytest.raises(ValueError):
        block_services(0, 11, 10)


def test_the_cardinality_summary_names_both_shapes_and_the_ceiling() -> None:
    """Each shape's raw ratio (the target's figure, said met or missed), the trivial handler's
    on the same bytes, and the agent's own: (agent - trivial) at 10,000 over the same at 10."""
    text = window_cardinality({("fan-in", 10): 1.6, ("fan-in", 10_000): 3.2,
                               ("sdk", 10): 1.5, ("sdk", 10_000): 1.65},
                              {("fan-in", 10): 0.5, ("fan-in", 10_000): 0.9,
                               ("sdk", 10): 0.5, ("sdk", 10_000): 0.55})
    assert "SDK shape" in text and "fan-in" in text
    assert "= 1.10 x (meets the 20 % target)" in text and "= 2.00 x (misses the 20 % target)" in text
    assert "0.50 -> 0.90 s = 1.80 x" in text and "0.50 -> 0.55 s = 1.10 x" in text
    assert "1.10 -> 2.30 s = 2.09 x" in text  # fan-in: (3.2 - 0.9) / (1.6 - 0.5)
    assert "1.00 -> 1.10 s = 1.10 x" in text  # sdk: (1.65 - 0.55) / (1.5 - 0.5)
    assert own_ratio(1.6, 3.2, 0.5, 0.9) == pytest.approx(2.3 / 1.1)


def test_a_short_sdk_shape_run_archives_windows_of_its_services() -> None:
    r = run(seconds=1.0, clients=2, warmup=0.5, services=1000, per_request=8, window_seconds=60)
    assert r["shape"] == "sdk-8" and r["acked_spans"] == r["archived_spans"] > 0
    # one window (60 s) holds every request: 125 consecutive ones meet all 1,000 services
    assert r["acked_spans"] >= 125 * 512 and max(r["window_services"]) == 1000


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
