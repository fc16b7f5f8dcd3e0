"""Realistic OTLP trace export requests for benchmarks and tests.

A request looks like what an OpenTelemetry SDK's batch span processor sends: a few
resources (services) with the resource attributes the SDK and resource detectors set, each
with one instrumentation scope per library, and spans carrying the attributes the common
instrumentations emit (about 8 each): HTTP server and client spans (old and new semantic
conventions), database client spans with SQL statements, messaging producers and internal
spans with ``code.*`` attributes. Ids and timings are random but seeded, so a seed always
gives the same bytes.
"""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

#: (service, cloud provider, region) of the services in a request.
SERVICES = (
    ("checkout", "aws", "eu-west-3"),
    ("cart", "aws", "eu-central-1"),
    ("payments", "gcp", "europe-west1"),
    ("catalog", "aws", "us-east-1"),
    ("shipping", "azure", "pl"),
)
START_NS = 1_773_151_200_000_000_000  # 2026-03-10T14:00:00Z
SQL = (
    "SELECT id, sku, qty FROM cart_items WHERE cart_id = $1",
    "INSERT INTO orders (id, customer_id, total) VALUES ($1, $2, $3)",
    "UPDATE stock SET qty = qty - $1 WHERE sku = $2",
    "DELETE FROM sessions WHERE expires_at < now()",
    "/* controller='cart' */ SELECT count(*) FROM carts",
)


def _kv(key: str, value: str | int | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _attrs(rng: random.Random, service: str) -> tuple[int, str, dict[str, str | int | bool]]:
    """(kind, name, attributes) of one span, drawn from a realistic mix."""
    roll = rng.random()
    new = rng.random() < 0.5  # new (stable) vs old HTTP/DB semantic conventions
    code = {"code.function": f"handle_{rng.randrange(40)}", "code.namespace": f"{service}.views"}
    if roll < 0.2:
        route = f"/api/{service}/{rng.choice(['items', 'orders', 'status'])}"
        return Span.SPAN_KIND_SERVER, f"GET {route}", {
            "http.request.method" if new else "http.method": "GET",
            "http.route": route,
            "url.scheme": "https",
            "http.response.status_code" if new else "http.status_code": 200,
            "server.address": f"{service}.internal",
            "network.protocol.version": "1.1",
            "user_agent.original": "Mozilla/5.0 (X11; Linux x86_64)",
            "client.address": f"10.0.{rng.randrange(256)}.{rng.randrange(256)}",
        }
    if roll < 0.55:
        statement = rng.choice(SQL)
        return Span.SPAN_KIND_CLIENT, statement.split()[0 if statement[0] != "/" else 4], {
            "db.system.name" if new else "db.system": "postgresql",
            "db.query.text" if new else "db.statement": statement,
            "db.namespace" if new else "db.name": "shop",
            "server.address": "db.internal",
            "server.port": 5432,
            "db.user": "app",
            **code,
        }
    if roll < 0.8:
        host = rng.choice(["api.stripe.com", "inventory.internal", "cdn.example.org"])
        return Span.SPAN_KIND_CLIENT, "GET", {
            "http.request.method" if new else "http.method": "GET",
            "url.full" if new else "http.url": f"https://{host}/v1/{rng.randrange(10_000)}",
            "server.address": host,
            "server.port": 443,
            "http.response.status_code" if new else "http.status_code": 200,
            "http.response.body.size" if new else "http.response_content_length": int(
                rng.lognormvariate(9, 2)
            ),
            "network.protocol.version": "1.1",
            **code,
        }
    if roll < 0.9:
        return Span.SPAN_KIND_PRODUCER, "orders publish", {
            "messaging.system": "kafka",
            "messaging.destination.name": "orders",
            "messaging.operation": "publish",
            "messaging.message.id": f"{rng.getrandbits(64):016x}",
            "messaging.kafka.destination.partition": rng.randrange(12),
            "server.address": "kafka.internal",
            "server.port": 9092,
            **code,
        }
    return Span.SPAN_KIND_INTERNAL, f"render {rng.randrange(30)}", {
        **code,
        "code.filepath": f"/srv/{service}/views.py",
        "code.lineno": rng.randrange(1, 900),
        "thread.id": rng.randrange(1, 64),
        "thread.name": "worker",
        "app.cache_hit": rng.random() < 0.5,
        "app.items": rng.randrange(100),
    }


def _span(rng: random.Random, service: str, trace_id: bytes, parent: bytes) -> Span:
    kind, name, attrs = _attrs(rng, service)
    start = START_NS + rng.randrange(60_000_000_000)
    span = Span(
        trace_id=trace_id,
        span_id=rng.randbytes(8),
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=start + rng.randrange(100_000, 50_000_000),
        attributes=[_kv(k, v) for k, v in attrs.items()],
        flags=0x100,
        status=Status(code=Status.STATUS_CODE_UNSET),
    )
    return span


def _resource(service: str, provider: str, region: str) -> Resource:
    attrs = {
        "service.name": service,
        "service.version": "1.4.2",
        "deployment.environment": "production",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": "1.27.0",
        "cloud.provider": provider,
        "cloud.region": region,
        "host.name": f"{service}-7d9f-x2k4",
    }
    return Resource(attributes=[_kv(k, v) for k, v in attrs.items()])


def services_of(n: int | None) -> tuple[tuple[str, str, str], ...]:
    """The five named services, or ``n`` numbered ones (``svc-00042``) over their regions."""
    if n is None:
        return SERVICES
    return tuple((f"svc-{k:05d}", SERVICES[k % 5][1], SERVICES[k % 5][2]) for k in range(n))


def block_services(block: int, per_request: int, services: int) -> list[int]:
    """The indices (into :func:`services_of`) of the ``per_request`` services of request
    ``block`` in the SDK shape: consecutive ones, wrapping, so any ``ceil(services /
    per_request)`` consecutive blocks meet every service."""
    if not 1 <= per_request <= services:
        raise ValueError(f"per_request must be 1..{services}, not {per_request}")
    return [(block * per_request + j) % services for j in range(per_request)]


def make_request(n_spans: int = 512, seed: int = 0, services: int | None = None,
                 per_request: int | None = None, block: int = 0) -> ExportTraceServiceRequest:
    """A request of ``n_spans`` spans spread over the services, ~8 attributes per span.

    ``services``: draw each span's service from that many numbered ones (a window then meets
    up to that many distinct services) instead of the five named ones: the gateway/fan-in
    shape (a collector in front of everything: at 10,000 services a request carries ~500
    resources of about one span each).

    ``per_request`` (with ``services``): the SDK shape instead: the request's spans come from
    ``per_request`` services only (:func:`block_services` of ``block``), in equal consecutive
    runs (whole traces), one resource each, as an SDK (1) or a per-node collector (a few)
    sends; cycling ``block`` over the requests still meets every service."""
    rng = random.Random(seed)
    table = services_of(services)
    per_service: dict[int, list[Span]] = {}
    trace_id, parent = rng.randbytes(16), rng.randbytes(8)
    mine = None
    if per_request is not None:
        if services is None:
            raise ValueError("per_request needs services")
        mine = block_services(block, per_request, services)
    for i in range(n_spans):
        if i % 8 == 0:  # a trace is ~8 spans
            trace_id, parent = rng.randbytes(16), rng.randbytes(8)
        which = rng.randrange(len(table)) if mine is None else mine[i * len(mine) // n_spans]
        per_service.setdefault(which, []).append(_span(rng, table[which][0], trace_id, parent))
    request = ExportTraceServiceRequest()
    order = sorted(per_service) if mine is None else [w for w in mine if w in per_service]
    for which in order:
        (service, provider, region), spans = table[which], per_service[which]
        scope = InstrumentationScope(name="opentelemetry.instrumentation.auto", version="0.48b0")
        request.resource_spans.append(
            ResourceSpans(
                resource=_resource(service, provider, region),
                scope_spans=[ScopeSpans(scope=scope, spans=spans)],
                schema_url="https://opentelemetry.io/schemas/1.26.0",
            )
        )
    return request


def make_request_bytes(n_spans: int = 512, seed: int = 0, services: int | None = None,
                       per_request: int | None = None, block: int = 0) -> bytes:
    return make_request(n_spans, seed, services, per_request, block).SerializeToString()
