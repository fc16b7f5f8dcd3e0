"""OTLP/JSON specifics: field-name forms, id and integer encodings, errors with paths, rejects."""

from __future__ import annotations

import base64

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.batch import OP_HTTP, OP_SQL_SELECT
from agent.otlp import OtlpDecodeError, decode_json
from agent.otlp.jsonfmt import decode_json_python

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
T0 = 1_773_151_200_000_000_000


def doc(*spans: dict, resource: dict | None = None) -> dict:
    res = resource or {"attributes": [{"key": "service.name", "value": {"stringValue": "cart"}}]}
    return {"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": list(spans)}]}]}


def sp(**fields: object) -> dict:
    base = {"traceId": TRACE_HEX, "name": "op", "kind": 3, "startTimeUnixNano": str(T0),
            "endTimeUnixNano": str(T0 + 10)}  # fmt: skip
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


def decode(d: dict) -> object:
    return decode_json(orjson.dumps(d))


def test_camel_case_hex_ids_and_int64_strings():
    batch = decode(doc(sp(attributes=[
        {"key": "db.system", "value": {"stringValue": "pg"}},
        {"key": "db.statement", "value": {"stringValue": "SELECT 1"}},
    ])))  # fmt: skip
    assert batch.services == ["cart"] and batch.op_class.tolist() == [OP_SQL_SELECT]
    assert batch.trace_lo.tolist() == [int(TRACE_HEX[16:], 16)]
    assert batch.start_ns.tolist() == [T0] and batch.duration_ns.tolist() == [10]


def test_snake_case_base64_ids_numbers_and_enum_names_are_accepted():
    raw = bytes.fromhex(TRACE_HEX)
    d = {"resource_spans": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"string_value": "cart"}}]},
        "scope_spans": [{"spans": [{
            "trace_id": base64.b64encode(raw).decode(), "name": "GET", "kind": "SPAN_KIND_CLIENT",
            "start_time_unix_nano": T0, "end_time_unix_nano": T0 + 5,
            "attributes": [{"key": "url.full", "value": {"string_value": "https://x"}},
                           {"key": "http.response.body.size", "value": {"int_value": 42}}]}]}]}]}  # fmt: skip
    batch = decode(d)
    assert batch.op_class.tolist() == [OP_HTTP] and batch.response_bytes.tolist() == [42]
    assert batch.trace_lo.tolist() == [int(TRACE_HEX[16:], 16)] and batch.duration_ns.tolist() == [5]
    url_safe = base64.urlsafe_b64encode(b"\xfb\xff" * 8).decode()
    assert len(decode(doc(sp(traceId=url_safe)))) == 1


def test_unknown_fields_and_nulls_are_ignored():
    batch = decode({"resourceSpans": [{"resource": None, "scopeSpans": [{"spans": [
        sp(name=None, kind=None, attributes=None, events=[{"x": 1}], flags=256)
    ]}], "schemaUrl": "s", "futureField": {"a": [1]}}], "extra": True})  # fmt: skip
    assert batch.services == ["unknown_service"] and batch.endpoints == [""]


def test_values_of_unread_attributes_are_not_checked():
    batch = decode(doc(sp(attributes=[{"key": "app.x", "value": {"intValue": "not a number"}}])))
    assert len(batch) == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (doc(sp(), sp(), sp(), sp(startTimeUnixNano=1.5)),
         "resourceSpans[0].scopeSpans[0].spans[3].startTimeUnixNano: expected an integer or integer string, got 1.5"),
        (doc(sp(endTimeUnixNano="12a")), "spans[0].endTimeUnixNano: expected an integer or integer string, got '12a'"),
        (doc(sp(endTimeUnixNano=True)), "spans[0].endTimeUnixNano: expected an integer or integer string, got True"),
        ({"resourceSpans": {"a": 1}}, "resourceSpans: expected a list, got {'a': 1}"),
        ([], "the request: expected an object, got []"),
        ({"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}, "resourceSpans[0].scopeSpans[0].spans[0]: expected an object, got 7"),
        (doc(sp(name=3)), "spans[0].name: expected a string, got 3"),
        (doc(sp(kind="SERVER")), "spans[0].kind: expected a span kind"),
        (doc(sp(attributes=[{"key": 1}])), "spans[0].attributes[0].key: expected a string, got 1"),
        (doc(sp(attributes=[{"key": "db.system", "value": {"stringValue": 5}}])),
         "spans[0].attributes[0].value.stringValue: expected a string, got 5"),
        (doc(sp(attributes=[{"key": "http.response.body.size", "value": {"intValue": "1e3"}}])),
         "spans[0].attributes[0].value.intValue: expected an integer or integer string, got '1e3'"),
        (doc(resource={"attributes": [{"key": "service.name", "value": "cart"}]}),
         "resourceSpans[0].resource.attributes[0].value: expected an object, got 'cart'"),
    ],
)
def test_wrong_shapes_name_the_path(document, message):
    with pytest.raises(OtlpDecodeError) as info:
        decode(document)
    assert message in str(info.value)


def test_invalid_json_says_so():
    with pytest.raises(OtlpDecodeError, match="not valid JSON"):
        decode_json(b'{"resourceSpans": [')


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"traceId": ...}, "trace_id_invalid"),
        ({"traceId": TRACE_HEX[:30]}, "trace_id_invalid"),
        ({"traceId": "zz" * 16}, "trace_id_invalid"),
        ({"traceId": "0" * 32}, "trace_id_invalid"),
        ({"traceId": 12345}, "trace_id_invalid"),
        ({"traceId": base64.b64encode(b"\x01" * 8).decode()}, "trace_id_invalid"),
        ({"startTimeUnixNano": "-1"}, "timestamp_out_of_range"),
        ({"endTimeUnixNano": str(2**64)}, "timestamp_out_of_range"),
    ],
)
def test_per_span_problems_reject_only_that_span(fields, reason):
    batch = decode(doc(sp(name="kept"), sp(name="bad", **fields)))
    assert batch.endpoints == ["kept"] and len(batch) == 1
    assert batch.rejected == 1 and batch.counters == {reason: 1}


PARENT_HEX = "53995c3f42cd8ad8"


@pytest.mark.parametrize(
    ("parent", "is_root", "invalid"),
    [
        (..., True, False),  # absent
        (None, True, False),
        ("", True, False),
        (PARENT_HEX, False, False),
        (PARENT_HEX.upper(), False, False),
        (base64.b64encode(bytes.fromhex(PARENT_HEX)).decode(), False, False),
        (base64.urlsafe_b64encode(b"\xfb\xff" * 4).decode(), False, False),
        ("0" * 16, False, True),  # all zero: an invalid span id
        (base64.b64encode(bytes(8)).decode(), False, True),
        ("zz" * 8, False, True),
        (PARENT_HEX[:14], False, True),
        (TRACE_HEX, False, True),  # a trace id's length
        (base64.b64encode(b"\x01" * 7).decode(), False, True),
        (PARENT_HEX[:11], False, True),  # unpadded base64 is not accepted, as for trace ids
        (12345, False, True),
        ({}, False, True),
        ([], False, True),
        (True, False, True),
    ],
)
def test_parent_span_id_forms(parent, is_root, invalid):
    """Absent, null and "" make a root; a parent that is not a span id (as traceId: hex or
    base64 of the right length, not all zero) is counted and is not a root; the span is kept."""
    for decoder in (decode_json, decode_json_python):
        batch = decoder(orjson.dumps(doc(sp(parentSpanId=parent), sp(name="root"))))
        assert len(batch) == 2 and batch.rejected == 0
        assert batch.is_root.tolist() == [is_root, True]
        assert batch.counters == ({"parent_span_id_invalid": 1} if invalid else {})


def test_snake_case_parent_span_id_is_read_too():
    batch = decode(doc(sp(parent_span_id=PARENT_HEX), sp(parentSpanId=None, parent_span_id="")))
    assert batch.is_root.tolist() == [False, True]


_KEYS = ["resourceSpans", "resource_spans", "resource", "attributes", "key", "value", "stringValue",
         "intValue", "int_value", "scopeSpans", "spans", "traceId", "name", "kind",
         "startTimeUnixNano", "endTimeUnixNano", "service.name", "cloud.region", "db.system"]  # fmt: skip
_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.sampled_from(_KEYS + [TRACE_HEX, "12", "SPAN_KIND_SERVER", "eu-west-3"]) | st.text(max_size=4)
)  # fmt: skip
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=3), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(document=_json)
def test_any_json_document_decodes_or_raises_otlp_decode_error(document):
    """No TypeError, KeyError or AttributeError escapes, whatever the shapes."""
    try:
        batch = decode(document)
    except OtlpDecodeError as exc:
        assert ": expected " in str(exc)
    else:
        assert len(batch) + batch.rejected >= 0


@settings(max_examples=150, deadline=None)
@given(span_fields=st.dictionaries(st.sampled_from(_KEYS), _json, max_size=6))
def test_any_span_object_decodes_or_raises_otlp_decode_error(span_fields):
    try:
        decode(doc(sp(**span_fields)))
    except OtlpDecodeError as exc:
        assert "resourceSpans[0].scopeSpans[0].spans[0]" in str(exc)
