"""Jaeger JSON and Zipkin v2 JSON trace documents -> the OTLP/JSON document of the same spans.

Users' traces often sit in Jaeger or Zipkin, not in OTLP files. Rather than a second set of
rules, each span is rewritten as the OTLP/JSON span it was before the exporter translated it,
and the one OTLP walk (``agent.otlp.jsonfmt``) scores it, so a span scores the same whichever
of the three formats carried it. The translations are the documented ones:

- **Jaeger** (the query API's ``GET /api/traces`` answer ``{"data": [trace, ...]}``, the UI's
  download of one trace or of a result list, or a bare trace object): a trace has ``spans``
  and ``processes``; ``process.serviceName`` is ``service.name`` and ``process.tags`` are the
  resource attributes; ``startTime``/``duration`` are microseconds; the parent is the first
  ``CHILD_OF`` (else ``FOLLOWS_FROM``) reference, or the older ``parentSpanID``; the OTLP span
  kind travels as the ``span.kind`` tag (``client``, ``server``, ``producer``, ``consumer``,
  ``internal``); tags are typed (``string``, ``bool``, ``int64``, ``float64``; ``binary``
  carries nothing carbonspan reads and is dropped). Jaeger writes ids without leading zeros
  (a 64-bit trace id as 16 hex digits): they are left-padded to OTLP's 32 and 16.
  OpenTracing tag names that Jaeger clients wrote before OpenTelemetry get their
  OpenTelemetry names when the new name is absent: ``db.type`` -> ``db.system``,
  ``peer.hostname`` -> ``server.address``, ``message_bus.destination`` -> ``messaging.system``
  (an OpenTracing producer names only the destination; the span is still a messaging one).
- **Zipkin v2** (``POST /api/v2/spans`` bodies and ``GET /api/v2/trace/{id}`` answers: a list of
  spans, or a list of such lists): ``localEndpoint.serviceName`` is ``service.name`` (Zipkin
  has no other resource attributes, so a region must be a span tag or come from the config);
  ``kind`` is ``CLIENT``/``SERVER``/``PRODUCER``/``CONSUMER`` (absent: internal);
  ``timestamp``/``duration`` are microseconds (absent in an incomplete span: start 0, counted
  as ``timestamp_absurd``, not scored as a time); every tag value is a string, as the
  OpenTelemetry Zipkin exporter writes them, so the response-size tags
  (``http.response.body.size``, ``http.response_content_length``) are read back as integers
  when they are decimal digits, and ``error`` is dropped.

- **Tempo** (trace by id: ``/api/traces/<id>`` answers ``{"batches": [...]}``, the OTLP
  resource spans under another name, ``/api/v2/traces/<id>`` answers ``{"trace": {...}}``):
  the OTLP spans as they are (``instrumentationLibrarySpans`` read as ``scopeSpans``).

Anything else is refused with a message naming what was found (Zipkin v1's ``annotations``,
an empty document, a JSON value that is no trace document at all), never scored as nothing.
"""

from __future__ import annotations

from typing import Any

from agent.otlp.errors import OtlpDecodeError

#: OpenTracing names (Jaeger clients before OpenTelemetry) -> the OpenTelemetry attribute
#: read when the OpenTelemetry name is absent.
OPENTRACING_NAMES = {
    "db.type": "db.system",
    "peer.hostname": "server.address",
    "message_bus.destination": "messaging.system",
}
#: Tags whose value Zipkin carries as a string but OTLP as an integer.
ZIPKIN_INTEGER_TAGS = frozenset({"http.response.body.size", "http.response_content_length"})
_JAEGER_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_ZIPKIN_KINDS = {"SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}


def detect(doc: Any) -> str:
    """``"otlp"``, ``"jaeger"``, ``"zipkin"`` or ``"tempo"``; raises naming what it is instead."""
    if isinstance(doc, dict):
        if not doc or "resourceSpans" in doc or "resource_spans" in doc:
            return "otlp"  # ``{}`` is OTLP's empty request
        if isinstance(doc.get("batches"), list) or isinstance(doc.get("trace"), dict):
            return "tempo"
        if isinstance(doc.get("data"), list) or ("spans" in doc and "processes" in doc):
            return "jaeger"
        keys = ", ".join(sorted(map(str, doc))[:8]) or "none"
        raise OtlpDecodeError(
            "not a trace document carbonspan reads: a JSON object with keys "
            f"[{keys}]; expected OTLP JSON (resourceSpans), a Jaeger export (data[] or a trace "
            "with spans and processes) or a Zipkin v2 span list"
        )
    if isinstance(doc, list):
        spans = _zipkin_spans(doc)
        if any(isinstance(s, dict) and "traceID" in s and "spans" in s for s in doc):
            return "jaeger"  # the UI's download of a result list: a bare list of traces
        if spans and all(isinstance(s, dict) for s in spans):
            if any("annotations" in s or "binaryAnnotations" in s for s in spans):
                if not any("localEndpoint" in s or "kind" in s for s in spans):
                    raise OtlpDecodeError(
                        "Zipkin v1 JSON (annotations/binaryAnnotations) is not supported: "
                        "export Zipkin v2 JSON instead (GET /api/v2/trace/{id} or "
                        "/api/v2/traces)"
                    )
            return "zipkin"
        raise OtlpDecodeError(
            "not a trace document carbonspan reads: a JSON list that holds no Zipkin v2 "
            "spans (objects with traceId and id) and no Jaeger traces"
        )
    raise OtlpDecodeError(f"not a trace document carbonspan reads: a JSON {type(doc).__name__}")


def to_otlp(doc: Any) -> tuple[str, dict[str, Any]]:
    """``(format, OTLP/JSON document)`` of a trace document of any supported format."""
    found = detect(doc)
    if found == "jaeger":
        return found, _jaeger(doc)
    if found == "zipkin":
        return found, _zipkin(_zipkin_spans(doc))
    if found == "tempo":
        return found, _tempo(doc)
    return found, doc


def _tempo(doc: dict[str, Any]) -> dict[str, Any]:
    """Tempo's trace by id: ``{"batches": [ResourceSpans]}`` (``/api/traces/<id>``) or
    ``{"trace": {"resourceSpans": [...]}}`` (``/api/v2/traces/<id>``); resource spans of older
    Tempo versions hold ``instrumentationLibrarySpans`` where OTLP now says ``scopeSpans``."""
    inner = doc["trace"] if isinstance(doc.get("trace"), dict) else {"resourceSpans": doc["batches"]}
    batches = inner.get("resourceSpans", inner.get("batches", []))
    out = []
    for rs in batches if isinstance(batches, list) else []:
        if isinstance(rs, dict) and "scopeSpans" not in rs and "instrumentationLibrarySpans" in rs:
            rs = {**rs, "scopeSpans": rs["instrumentationLibrarySpans"]}
        out.append(rs)
    return {"resourceSpans": out}


# --- Jaeger ----------------------------------------------------------------------------------


def _jaeger_traces(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    data = doc.get("data")
    return data if isinstance(data, list) else [doc]


def _jaeger(doc: Any) -> dict[str, Any]:
    resource_spans: list[dict[str, Any]] = []
    for t, trace in enumerate(_jaeger_traces(doc)):
        where = f"trace {t}"
        if not isinstance(trace, dict):
            raise OtlpDecodeError(f"Jaeger {where}: expected an object, got {_kind_of(trace)}")
        processes = trace.get("processes") or {}
        spans = trace.get("spans")
        if not isinstance(processes, dict) or not isinstance(spans, list):
            raise OtlpDecodeError(f"Jaeger {where}: expected 'spans' (list) and 'processes' (object)")
        by_process: dict[str, list[dict[str, Any]]] = {}
        for s, span in enumerate(spans):
            if not isinstance(span, dict):
                raise OtlpDecodeError(f"Jaeger {where}, span {s}: expected an object")
            pid = span.get("processID")
            by_process.setdefault(pid if isinstance(pid, str) else "", []).append(
                _jaeger_span(span, trace, f"{where}, span {s}")
            )
        for pid, otlp_spans in by_process.items():
            process = processes.get(pid) if pid else span_process(spans, pid)
            resource_spans.append(
                {"resource": {"attributes": _jaeger_resource(process)},
                 "scopeSpans": [{"spans": otlp_spans}]}
            )
    return {"resourceSpans": resource_spans}


def span_process(spans: list[Any], pid: str) -> dict[str, Any] | None:
    """A span without ``processID`` may carry its ``process`` inline (Jaeger's gRPC JSON)."""
    for span in spans:
        if isinstance(span, dict) and span.get("processID", "") == pid:
            process = span.get("process")
            if isinstance(process, dict):
                return process
    return None


def _jaeger_resource(process: Any) -> list[dict[str, Any]]:
    attrs: list[dict[str, Any]] = []
    if isinstance(process, dict):
        if isinstance(process.get("serviceName"), str):
            attrs.append(_attr("service.name", {"stringValue": process["serviceName"]}))
        attrs.extend(_jaeger_tags(process.get("tags")))
    return attrs


def _jaeger_tags(tags: Any) -> list[dict[str, Any]]:
    if not isinstance(tags, list):
        return []
    out = []
    for tag in tags:
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            continue
        value = _jaeger_value(tag.get("type", "string"), tag.get("value"))
        if value is not None:
            out.append(_attr(tag["key"], value))
    return _with_otel_names(out)


def _jaeger_value(kind: Any, value: Any) -> dict[str, Any] | None:
    kind = kind.lower() if isinstance(kind, str) else "string"
    if kind == "bool" and isinstance(value, (bool, str)):
        return {"boolValue": value if isinstance(value, bool) else value.lower() == "true"}
    if kind == "int64" and isinstance(value, (int, str)) and not isinstance(value, bool):
        return {"intValue": str(value)}
    if kind == "float64" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"doubleValue": float(value)}
    if kind == "string" and isinstance(value, str):
        return {"stringValue": value}
    return None  # binary, or a value that does not match its declared type: nothing we read


def _jaeger_span(span: dict[str, Any], trace: dict[str, Any], where: str) -> dict[str, Any]:
    tags = _jaeger_tags(span.get("tags"))
    kind = 0
    for tag in tags:
        if tag["key"] == "span.kind":
            kind = _JAEGER_KINDS.get(str(tag["value"].get("stringValue", "")).lower(), 0)
    start = _micros(span.get("startTime"), f"Jaeger {where}: startTime")
    duration = _micros(span.get("duration", 0), f"Jaeger {where}: duration")
    out: dict[str, Any] = {
        "traceId": _pad(span.get("traceID", trace.get("traceID")), 32),
        "spanId": _pad(span.get("spanID"), 16),
        "name": span.get("operationName") if isinstance(span.get("operationName"), str) else "",
        "kind": kind,
        "startTimeUnixNano": str(start * 1000),
        "endTimeUnixNano": str((start + duration) * 1000),
        "attributes": [t for t in tags if t["key"] != "span.kind"],
    }
    parent = _jaeger_parent(span)
    if parent is not None:
        out["parentSpanId"] = parent
    return out


def _jaeger_parent(span: dict[str, Any]) -> str | None:
    refs = span.get("references")
    if isinstance(refs, list):
        for wanted in ("CHILD_OF", "FOLLOWS_FROM"):
            for ref in refs:
                if isinstance(ref, dict) and ref.get("refType") == wanted:
                    return _pad(ref.get("spanID"), 16)
    parent = span.get("parentSpanID")
    return _pad(parent, 16) if isinstance(parent, str) and parent.strip("0") else None


# --- Zipkin v2 -------------------------------------------------------------------------------


def _zipkin_spans(doc: list[Any]) -> list[Any]:
    """A span list, or the list of span lists that ``GET /api/v2/traces`` answers."""
    if doc and all(isinstance(item, list) for item in doc):
        return [span for trace in doc for span in trace]
    return doc if any(isinstance(s, dict) and "traceId" in s for s in doc) else []


def _zipkin(spans: list[Any]) -> dict[str, Any]:
    by_service: dict[str | None, list[dict[str, Any]]] = {}
    for s, span in enumerate(spans):
        where = f"Zipkin span {s}"
        endpoint = span.get("localEndpoint")
        service = endpoint.get("serviceName") if isinstance(endpoint, dict) else None
        tags = span.get("tags") if isinstance(span.get("tags"), dict) else {}
        # Zipkin v2 leaves timestamp (and duration) out of an incomplete span: it is read as 0,
        # which the OTLP walk counts as timestamp_absurd (and backfill as untimed), not refused
        stamp = span.get("timestamp")
        start = 0 if stamp is None else _micros(stamp, f"{where}: timestamp")
        duration = _micros(span.get("duration", 0), f"{where}: duration")
        otlp: dict[str, Any] = {
            "traceId": _pad(span.get("traceId"), 32),
            "spanId": _pad(span.get("id"), 16),
            "name": span.get("name") if isinstance(span.get("name"), str) else "",
            "kind": _ZIPKIN_KINDS.get(str(span.get("kind", "")).upper(), 1),
            "startTimeUnixNano": str(start * 1000),
            "endTimeUnixNano": str((start + duration) * 1000),
            "attributes": _with_otel_names(
                [_attr(k, _zipkin_value(k, v)) for k, v in tags.items()
                 if isinstance(k, str) and isinstance(v, str) and k != "error"]
            ),
        }
        if isinstance(span.get("parentId"), str):
            otlp["parentSpanId"] = _pad(span["parentId"], 16)
        by_service.setdefault(service if isinstance(service, str) else None, []).append(otlp)
    return {
        "resourceSpans": [
            {"resource": {"attributes": [] if name is None else
                          [_attr("service.name", {"stringValue": name})]},
             "scopeSpans": [{"spans": otlp_spans}]}
            for name, otlp_spans in by_service.items()
        ]
    }


def _zipkin_value(key: str, value: str) -> dict[str, Any]:
    if key in ZIPKIN_INTEGER_TAGS and value.isascii() and value.isdigit():
        return {"intValue": value}
    return {"stringValue": value}


# --- shared ----------------------------------------------------------------------------------


def _attr(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


def _with_otel_names(attrs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    present = {a["key"] for a in attrs}
    extra = [
        _attr(OPENTRACING_NAMES[a["key"]], a["value"])
        for a in attrs
        if a["key"] in OPENTRACING_NAMES and OPENTRACING_NAMES[a["key"]] not in present
    ]
    return attrs + extra


def _pad(value: Any, digits: int) -> Any:
    """Left-pad a hex id to ``digits`` (Jaeger and Zipkin drop leading zeros / use 64 bits);
    anything that is not a short hex string is passed on for the OTLP walk to judge."""
    if isinstance(value, str) and 0 < len(value) < digits and value.isascii():
        try:
            int(value, 16)
        except ValueError:
            return value
        return value.rjust(digits, "0")
    return value


def _micros(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OtlpDecodeError(f"{where}: expected microseconds (an integer), got {_kind_of(value)}")
    try:
        micros = int(value)
    except ValueError:
        raise OtlpDecodeError(f"{where}: expected microseconds (an integer), got {value!r:.40}") from None
    if micros < 0:
        raise OtlpDecodeError(f"{where}: {micros} is negative")
    return micros


def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__
