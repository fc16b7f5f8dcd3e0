"""Review 19, end to end with real agent processes: replay equals live with the C decoders, the
C scorer, the C accumulator and the C WAL record.

The same requests (OTLP/protobuf over gRPC and OTLP/JSON over HTTP, 5, 1,000 and 10,000
services interleaved so that services appear and disappear, the window passing the 4,096-service
and 4,096-endpoint caps) go to two agents: one runs to a clean stop (live merging only), the
other is killed with SIGKILL and restarted (the window comes back from the C WAL records into the
C accumulator, and is archived at the restart). Their archived windows must agree in every figure, and with the
numpy reference's fold of the Python decoders' batches.
"""

from __future__ import annotations

import signal
import urllib.request

import grpc
from google.protobuf.json_format import MessageToJson

from agent.carbon.partial import WindowPartial
from agent.otlp.jsonfmt import decode_json_python
from agent.otlp.reference import decode_protobuf_reference
from agent.score import ScoringContext, score_batch_reference
from agent.window import build_report
from bench.workload import make_request
from schema.times import to_ns

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS = 512


def _requests() -> list[tuple[str, bytes]]:
    out = []
    for i in range(18):
        services = (None, 10_000, 1000, 10_000, 10_000, 10_000)[i % 6]
        request = make_request(SPANS, seed=1900 + i, services=services)
        if i % 2:
            out.append(("json", MessageToJson(request).encode()))
        else:
            out.append(("grpc", request.SerializeToString()))
    return out


def _send(agent, requests: list[tuple[str, bytes]]) -> None:  # noqa: ANN001
    channel = grpc.insecure_channel(agent.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    try:
        for kind, body in requests:
            if kind == "grpc":
                export(body, timeout=20)
            else:
                req = urllib.request.Request(agent.http_url + "/v1/traces", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=20) as answer:
                    assert answer.status == 200
    finally:
        channel.close()


def _figures(report: dict) -> dict:
    """The report without what depends on when the window opened and closed."""
    out = {k: v for k, v in report.items() if k not in ("window", "generated_at", "agent")}
    window = dict(report["window"])
    for k in ("start", "end", "opened", "closed", "duration_s"):
        window.pop(k, None)
    out["window"] = window
    return out


def test_replay_of_c_records_equals_live_merging_and_the_reference(start_agent) -> None:
    requests = _requests()
    live = start_agent("--window-seconds", "3600")
    _send(live, requests)
    assert live.stop(signal.SIGTERM) == 0
    (a,) = [r["report"] for r in live.records()]

    crashed = start_agent("--window-seconds", "3600")
    _send(crashed, requests)
    crashed.kill9()  # nothing archived: the window is in the WAL only, as C records
    again = start_agent("--window-seconds", "3600", root=crashed.root)
    assert f"{len(requests)} partials replayed" in again.startup_line, again.startup_line
    assert again.stop(signal.SIGTERM) == 0
    (b,) = [r["report"] for r in again.records()]  # the replayed window, archived at restart

    assert a["window"]["spans"] == b["window"]["spans"] == SPANS * len(requests)
    assert _figures(a) == _figures(b)
    assert len(a["green_summary"]["per_service_energy_kwh"]) == 4096  # the cap, "(other)" included

    # the specification: Python decoders, the numpy scorer, the merge fold
    ctx = ScoringContext.from_config(None)
    fold = WindowPartial.empty()
    for kind, body in requests:
        batch = decode_protobuf_reference(body) if kind == "grpc" else decode_json_python(body)
        fold = fold.merge(score_batch_reference(batch, ctx))
    assert fold.counters.get("service_overflow", 0) > 0, fold.counters  # past the 4,096 cap
    ref = build_report(fold, ctx, to_ns(b["window"]["start"]), to_ns(b["window"]["end"]))
    want = ref.model_dump(mode="json")
    got = _figures(b)
    for key in ("green_summary", "per_endpoint_io_ops", "counters", "methodology"):
        assert _figures(want).get(key) == got[key], key
