"""deploy/otel-collector against the kit and the agent: the exporters name the carbonspan
Service's ports, queue and retry, and the SDK env files configure working exporters; and what
a Collector needs from the agent's backpressure answers to retry them."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import grpc
import pytest

from .conftest import COLLECTOR, AgentProcess, Kit, load_yaml, read_env_file, wait_for

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FRAGMENTS = {  # file -> (carbonspan exporter, Service port name it must reach)
    "carbonspan-fanout.yaml": ("loadbalancing/carbonspan", "otlp-grpc"),
    "carbonspan-fanout-otlphttp.yaml": ("otlphttp/carbonspan", "otlp-http"),
}


def service_address(kit: Kit, host: str, port: int) -> tuple[dict, str]:
    """The kit's Service that ``host:port`` names, and the name of its port. A pod's stable
    name under the StatefulSet's governing Service (``<pod>.<service>.<ns>.svc...``) names
    that Service, for a pod the StatefulSet has."""
    labels = host.split(".")
    if len(labels) == 6:  # carbonspan-0.carbonspan-headless.carbonspan.svc.cluster.local
        pod, host = labels[0], ".".join(labels[1:])
        sts = kit.statefulset
        name, _, ordinal = pod.rpartition("-")
        assert name == sts["metadata"]["name"] and int(ordinal) < sts["spec"]["replicas"], pod
        assert labels[1] == sts["spec"]["serviceName"], host
    name, _, rest = host.partition(".")
    namespace = rest.split(".")[0]
    assert rest in (f"{namespace}.svc.cluster.local", f"{namespace}.svc"), host
    svc = kit.get("Service", name)
    assert svc["metadata"]["namespace"] == namespace
    (p,) = [p for p in svc["spec"]["ports"] if p["port"] == port]
    return svc, p["name"]


def _pipelines_fan_out(cfg: dict, exporter: str) -> None:
    pipelines = cfg["service"]["pipelines"]
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(cfg.get(kind) or {}), (kind, pipeline)
    to_carbonspan = [p for p in pipelines.values() if exporter in p["exporters"]]
    assert len(to_carbonspan) == 1 and to_carbonspan[0]["exporters"] == [exporter]
    others = [p for p in pipelines.values() if exporter not in p["exporters"]]
    assert others, "the existing backend keeps its own pipeline"
    assert set(to_carbonspan[0]["receivers"]) <= {r for p in others for r in p["receivers"]}
    assert not [p for p in to_carbonspan[0].get("processors", []) if "sampl" in p]


@pytest.mark.parametrize("fragment", sorted(FRAGMENTS))
def test_the_collector_fragment_fans_out_to_carbonspan(kit: Kit, fragment: str) -> None:
    (cfg,) = load_yaml(COLLECTOR / fragment)
    exporter, port_name = FRAGMENTS[fragment]
    _pipelines_fan_out(cfg, exporter)
    e = cfg["exporters"][exporter]
    if exporter.startswith("loadbalancing/"):
        # one trace -> one agent: route by trace id over every agent pod of the headless Service
        assert e["routing_key"] == "traceID"
        assert list(e["resolver"]) == ["dns"], "one resolver (the others are commented)"
        dns = e["resolver"]["dns"]
        svc, name = service_address(kit, dns["hostname"], int(dns["port"]))
        assert svc["spec"]["clusterIP"] == "None" and name == port_name
        assert svc["metadata"]["name"] == kit.statefulset["spec"]["serviceName"]
        e = e["protocol"]["otlp"]
        assert "endpoint" not in e  # the resolver gives each agent's
        assert e["tls"]["insecure"] is True  # the ConfigMap sets no [agent.tls]
    else:
        # OTLP/HTTP cannot be routed by trace id: one agent pod, so a trace is not split
        url = urlsplit(e["endpoint"])
        assert url.scheme == "http" and url.path in ("", "/")
        assert url.hostname.startswith(f"{kit.statefulset['metadata']['name']}-0.")
        svc, name = service_address(kit, url.hostname, url.port)
        assert svc["spec"]["clusterIP"] == "None" and name == port_name
    assert e["sending_queue"]["enabled"] is True and e["retry_on_failure"]["enabled"] is True


@pytest.mark.parametrize("env_file,port_name", [("sdk-grpc.env", "otlp-grpc"),
                                                ("sdk-http.env", "otlp-http")])
def test_sdk_env_files_name_the_service(kit: Kit, env_file: str, port_name: str) -> None:
    env = read_env_file(COLLECTOR / env_file)
    url = urlsplit(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
    assert url.path == ("/v1/traces" if port_name == "otlp-http" else "")
    assert service_address(kit, url.hostname, url.port)[1] == port_name


def test_sdk_env_files_configure_exporters_the_agent_acknowledges(live) -> None:
    # the live agent got its spans from SDK exporters configured only by these env files
    assert live.acked_spans == 2 * 5 * 3


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory):
    """An agent with a one-request queue and a 1 s WAL sync: the second request is refused."""
    agent = AgentProcess(tmp_path_factory.mktemp("overload"), ["--window-seconds", "60"], {},
                         "[agent]\nqueue_size = 1\nretry_after_s = 1\n"
                         "[agent.archive]\nwal_fsync_delay_ms = 1000\n")
    try:
        yield agent.wait_ready(timeout=30)
    finally:
        agent.stop()


def _refused(agent, send) -> object:
    """Hold the only queue slot with one gRPC export, then ``send()`` another request."""
    from bench.workload import make_request_bytes

    channel = grpc.insecure_channel(agent.grpc_target)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    holder = threading.Thread(target=lambda: call(make_request_bytes(8, seed=1), timeout=30))
    holder.start()
    try:
        wait_for(lambda: agent.metric("carbonspan_queue_depth") >= 1, timeout=10,
                 what="the first request to hold the queue")
        return send(make_request_bytes(4, seed=2))
    finally:
        holder.join(timeout=30)
        channel.close()


def test_http_refusal_is_one_the_collectors_otlphttp_exporter_retries(overloaded) -> None:
    """otlphttp retries 429/503 and waits Retry-After when it is a number of seconds."""
    def send(body: bytes) -> urllib.error.HTTPError:
        req = urllib.request.Request(f"{overloaded.http_url}/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        return info.value

    err = _refused(overloaded, send)
    assert err.code == 429 and err.headers["Retry-After"].isdigit()


def test_grpc_refusal_carries_retry_info_in_the_status_details(overloaded) -> None:
    from google.rpc import status_pb2
    from google.rpc.error_details_pb2 import RetryInfo

    def send(body: bytes) -> grpc.RpcError:
        channel = grpc.insecure_channel(overloaded.grpc_target)
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as info:
            call(body, timeout=10)
        channel.close()
        return info.value

    err = _refused(overloaded, send)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
    assert details is not None, "no status details: the Collector drops this batch"
    status = status_pb2.Status.FromString(details)
    # gRPC's rich error model: the details' code and message are the call's own
    assert (status.code, status.message) == (grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], err.details())
    infos = [d for d in status.details if d.Is(RetryInfo.DESCRIPTOR)]
    assert len(infos) == 1
    info = RetryInfo()
    infos[0].Unpack(info)
    assert info.retry_delay.seconds == 1  # the agent's retry_after_s = 1
    # and the Python SDK's trailer is still there
    assert dict(err.trailing_metadata() or ()).get("google.rpc.retryinfo-bin") == info.SerializeToString()
