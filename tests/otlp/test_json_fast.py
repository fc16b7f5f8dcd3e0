"""The C OTLP/JSON walker (``agent.otlp.jsonfast``) gives exactly the Python walk's answers.

Well-formed requests are real protobuf requests turned into JSON by protobuf's own
``MessageToDict`` (base64 or hex trace ids, ``SPAN_KIND_*`` names or numbers, int64s as strings
or numbers, escaped or raw unicode); the C walker must decode every one of them itself. Hostile
requests are those mutated: values swapped for values of the wrong type, huge numbers, odd trace
ids, snake_case names, deleted or repeated fields, reordered members, nulls, duplicated JSON
keys, lone surrogates. For each, ``decode_json`` (C first) must give the same batch, or the same
exception and message, as ``decode_json_python`` (orjson + the Python walk), and whatever the C
walker accepts on its own must equal the Python batch.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import tracemalloc
from typing import Any

import orjson
import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_agree import assert_agrees
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from agent.otlp import jsonfast
from agent.otlp.jsonfast import decode_json_fast
from agent.otlp.jsonfmt import decode_json_python
from agent.otlp.rules import MAX_TIMESTAMP_NS

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- well-formed requests

SPAN_KEYS = ["cloud.region", "db.system", "db.system.name", "db.statement", "db.query.text",
             "db.operation.name", "db.operation",
             "messaging.system", "http.url", "url.full", "server.address", "net.peer.name",
             "http.method", "http.request.method", "http.response.body.size",
             "http.response_content_length", "code.function", "service.name"]  # fmt: skip
STRINGS = ["eu-west-3", "pl", "EU-West-3", "", "x" * 65, "eu wést", "postgresql", "kafka", "GET",
           "https://a/b", 'SELECT "id" FROM "t"', "/* c */ INSERT", "-- x\nDELETE", "updaté", "UPDATE", "BATCH insert", "BATCH",
           "tab\there", "nul\x00byte", "emoji 😀", "back\\slash"]  # fmt: skip
text = st.sampled_from(STRINGS) | st.text(max_size=6)
values = st.one_of(
    text.map(lambda s: AnyValue(string_value=s)),
    (st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 20_480])).map(lambda i: AnyValue(int_value=i)),
    st.sampled_from([AnyValue(bool_value=True), AnyValue(double_value=1.5), AnyValue(bytes_value=b"\x00\xff"),
                     AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="x")])), AnyValue()]),
)  # fmt: skip


@st.composite
def key_values(draw: st.DrawFn, keys: list[str]) -> KeyValue:
    key = draw(st.sampled_from(keys) | st.text(max_size=4))
    return KeyValue(key=key) if draw(st.integers(0, 9)) == 0 else KeyValue(key=key, value=draw(values))


timestamps = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, MAX_TIMESTAMP_NS - 1, MAX_TIMESTAMP_NS]) | st.integers(
    1_700_000_000_000_000_000, 1_700_000_000_000_100_000
)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    return Span(
        trace_id=draw(st.binary(min_size=16, max_size=16) | st.just(bytes(16)) | st.just(b"")),
        span_id=draw(st.binary(min_size=8, max_size=8)),
        # a root (no parent), a child, an all-zero parent (not a span id: counted, not a root);
        # parents of other lengths are odd ids the C walker leaves to Python (hostile tests)
        parent_span_id=draw(st.just(b"") | st.binary(min_size=8, max_size=8) | st.just(bytes(8))),
        name=draw(text),
        kind=draw(st.integers(0, 5) | st.sampled_from([-1, 6, 2**31 - 1, -(2**31)])),
        start_time_unix_nano=draw(timestamps),
        end_time_unix_nano=draw(timestamps),
        attributes=draw(st.lists(key_values(SPAN_KEYS), max_size=6)),
    )


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    resource_keys = ["service.name", "cloud.region", "host.name"]
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=draw(st.lists(key_values(resource_keys), max_size=4))),
                scope_spans=[ScopeSpans(spans=draw(st.lists(spans(), max_size=4))) for _ in range(draw(st.integers(0, 2)))],
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
    )


def to_doc(request: ExportTraceServiceRequest, hex_ids: bool, enum_ints: bool, int_numbers: bool) -> dict:
    """OTLP/JSON as protobuf writes it, with ids in hex and int64s as numbers when asked."""
    doc = MessageToDict(request, use_integers_for_enums=enum_ints)

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and hex_ids:
                    node[key] = base64.b64decode(value).hex()
                elif key in ("startTimeUnixNano", "endTimeUnixNano", "intValue") and int_numbers:
                    node[key] = int(value)
                else:
                    walk(value)

    walk(doc)
    return doc


def dumps(doc: Any, escape: bool) -> bytes:
    """JSON text of doc: raw UTF-8 (as orjson and JS write it) or every non-ASCII escaped."""
    return json.dumps(doc, ensure_ascii=escape).encode("utf-8", "surrogatepass")


@SETTINGS
@given(request=requests(), hex_ids=st.booleans(), enum_ints=st.booleans(), int_numbers=st.booleans(), escape=st.booleans())
def test_well_formed_requests_are_decoded_in_c_and_agree(request, hex_ids, enum_ints, int_numbers, escape, assert_same):
    data = dumps(to_doc(request, hex_ids, enum_ints, int_numbers), escape)
    assert assert_agrees(data, assert_same), "the C walker gave up on a well-formed request"


# ---------------------------------------------------------------- hostile requests

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**31, -(2**31) - 1]),
    st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e300, -0.0, 2.0]),
    st.text(max_size=5),
    st.sampled_from(["SPAN_KIND_SERVER", "SPAN_KIND_BOGUS", "123", "-5", "-0", "007", "1e3", " 1", "",
                     "18446744073709551616", "99999999999999999999999", "0" * 32, "5a" * 16, "5A" * 16,
                     "5a" * 15 + "zz", "AAAAAAAAAAAAAAAAAAAAAB==", "Ol5IQvq0KPdi5uKC5cFlfA==",
                     "Ol5IQvq0KPdi5uKC5cFlfA", "Ol5IQvq0KPdi5uKC5cFlfA=", "-_" * 11 + "==", "+/" * 11 + "==",
                     "Ol5IQvq0KPdi5uKC5cFl=A==", "Ol5IQvq0KPdi5uKC5cFlfA===", "é" * 16, "é" * 11 + "==",
                     "AQEBAQEBAQEBAQEBAQEB", "AQEBAQEBAQEBAQEBAQEBAQEBAQ==",
                     "5a" * 8, "0" * 16, "5a" * 7 + "zz", "U5lcP0LNitg=", "U5lcP0LNitg", "-_" * 5 + "-=",
                     "U5lcP0LNi=g=", "AAAAAAAAAAA=", "é" * 8, "é" * 11 + "="]),
    st.lists(st.integers(0, 3), max_size=2),
    st.sampled_from([{}, {"stringValue": "eu-west-3"}, {"intValue": "12"}, {"intValue": 2**63},
                     {"stringValue": None, "intValue": 7}, {"string_value": "x"}, {"int_value": 3},
                     {"stringValue": 5}, {"intValue": 1.5}, {"boolValue": True}, {"a": {"b": [1, {}]}}]),
)  # fmt: skip
SNAKE = {"resourceSpans": "resource_spans", "scopeSpans": "scope_spans", "traceId": "trace_id",
         "parentSpanId": "parent_span_id",
         "startTimeUnixNano": "start_time_unix_nano", "endTimeUnixNano": "end_time_unix_nano",
         "stringValue": "string_value", "intValue": "int_value"}  # fmt: skip


def _slots(node: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) of the document, depth first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in list(items):
        out.append((node, key))
        _slots(value, out)
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: dict) -> dict:
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(doc, [])
        if not slots:
            break
        node, key = draw(st.sampled_from(slots))
        op = draw(st.integers(0, 5))
        # Every value put into the document is a fresh copy: ODD's sample dicts are shared
        # between test cases, and a later mutation must not edit them (that made generation
        # depend on earlier cases, and could nest a dict inside itself -> RecursionError).
        if op == 0:
            node[key] = copy.deepcopy(draw(ODD))
        elif op == 1 and isinstance(node, dict):
            node[SNAKE.get(key, key.lower())] = node.pop(key)
        elif op == 2:
            node.pop(key)
        elif op == 3 and isinstance(node, list):
            node.insert(draw(st.integers(0, len(node))), copy.deepcopy(draw(st.sampled_from([node[key], None, {}, []]))))
        elif op == 4 and isinstance(node, dict):  # reorder members (resource after spans, value before key)
            order = draw(st.permutations(list(node)))
            items = [(k, node.pop(k)) for k in order]
            node.update(items)
        else:
            node[key] = copy.deepcopy(draw(ODD))
    return doc


TEXT_EDITS = [
    (b'"name":', b'"name":"dup","name":'),  # a repeated JSON key (orjson keeps the last)
    (b'"traceId":', b'"traceId":null,"traceId":'),
    (b'"parentSpanId":', b'"parentSpanId":"","parentSpanId":'),
    (b'"key":', b'"k\\u0065y":'),  # an escaped member name
    (b'"stringValue":"', b'"stringValue":"\\ud800'),  # a lone surrogate: invalid for orjson
    (b'"stringValue":"', b'"stringValue":"\\ud83d\\ude00\\"\\/\\b\\f\\n\\r\\t\\u00e9'),
    (b'"name":"', b'"name":"\\u0000\\u20ac'),
    (b'"resourceSpans":', b'"resourceSpans":null,"other":[[[[{}]]]],"resourceSpans":'),
    (b"}", b"} "),
    (b",", b" ,\n\t"),
    (b"[", b"[1,"),
    (b":", b":01"),
]


@SETTINGS
@given(request=requests(), hex_ids=st.booleans(), int_numbers=st.booleans(), data=st.data())
def test_hostile_requests_agree_with_the_python_walk(request, hex_ids, int_numbers, data, assert_same):
    doc = data.draw(mutated(to_doc(request, hex_ids, False, int_numbers)))
    text = dumps(doc, data.draw(st.booleans()))
    for old, new in data.draw(st.lists(st.sampled_from(TEXT_EDITS), max_size=2)):
        text = text.replace(old, new, 1)
    assert_agrees(text, assert_same)


def test_each_kind_of_oddity_takes_the_path_it_should(assert_same):
    """Handled in C: escapes, unicode, ids in both encodings, big timestamps as strings, nulls.
    Given up (Python decides): snake_case, repeated fields, odd ids, big numbers, bad JSON."""
    span = {"traceId": "5a" * 16, "name": "GET", "kind": 3, "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": 1700000000000000500, "attributes": [{"key": "url.full", "value": {"stringValue": "https://x"}}]}  # fmt: skip

    def request(**changes: Any) -> bytes:
        body = {k: v for k, v in {**span, **changes}.items() if v is not ...}
        return json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                                              "scopeSpans": [{"spans": [body]}]}]}).encode()  # fmt: skip

    in_c = [request(), request(name="caf\\u00e9 \U0001f600"), request(traceId="Ol5IQvq0KPdi5uKC5cFlfA=="),
            request(traceId="-_" * 11 + "=="), request(traceId=None), request(traceId=...), request(traceId=""),
            request(traceId=7), request(traceId="zz" * 16), request(traceId="0" * 32), request(kind="SPAN_KIND_SERVER"),
            request(startTimeUnixNano="99999999999999999999999"), request(endTimeUnixNano=-1), request(name=None),
            request(attributes=None), request(kind=-(2**31)), request(startTimeUnixNano=2**64 - 1),
            request(attributes=[{"value": {"intValue": 5}, "key": "url.full"}, {"value": "any"}]),
            request(parentSpanId="53995c3f42cd8ad8"), request(parentSpanId="U5lcP0LNitg="), request(parentSpanId=""),
            request(parentSpanId=None), request(parentSpanId="0" * 16), request(parentSpanId="zz" * 8),
            request(parentSpanId=7), request(parentSpanId={"a": [1]}), request(parentSpanId="-_" * 5 + "-=")]  # fmt: skip
    given_up = [request(trace_id="5a" * 16), request(traceId="AQEBAQEBAQEBAQEBAQEB"), request(kind="server"),
                request(kind=2**31), request(kind=2.0), request(startTimeUnixNano=2**64), request(startTimeUnixNano=1.5),
                request(name=3), request(attributes={}), request(parent_span_id="53995c3f42cd8ad8"),
                request(parentSpanId="U5lcP0LNitg"), request(parentSpanId="5a" * 7), request(parentSpanId="U5lcP0LNi=g="),
                request(attributes=[{"key": "url.full", "value": {"string_value": "x"}}]),
                request(attributes=[{"key": "http.response.body.size", "value": {"intValue": "9223372036854775808"}}]),
                b'{"resourceSpans": []} x', b"\xef\xbb\xbf{}", b'{"a": "\\ud800"}', b'{"a": 1e400}', b"[]",
                b'{"a": "\xed\xa0\x80"}', b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}"]  # fmt: skip
    for data in in_c:
        assert assert_agrees(data, assert_same), data
    for data in given_up:
        assert not assert_agrees(data, assert_same), data
    assert len(decode_json_fast(request())) == 1


def test_strings_and_memoryviews_are_decoded_like_bytes(workload, assert_same):
    data = orjson.dumps(MessageToDict(workload.make_request(16, 3)))
    want = decode_json_python(data)
    for form in (data.decode(), bytearray(data), memoryview(data)):
        got = decode_json_fast(form)
        assert got is not None
        assert_same(got, want)
    assert decode_json_fast('{"a": "\udc00"}') is None  # a str orjson refuses: Python reports it


def test_the_json_extension_is_built_and_used(workload):
    """A broken or stale build must fail here rather than silently decode at Python speed."""
    assert jsonfast.FAST_JSON, "agent.otlp._jsonwalk is not built: `.venv/bin/pip install -e '.[test]'`"
    data = orjson.dumps(MessageToDict(workload.make_request(512, 0)))
    batch = decode_json_fast(data)
    assert batch is not None and len(batch) + batch.rejected == 512


# ---------------------------------------------------------------- fuzz: never a crash, never a difference

VOCABULARY = ["resourceSpans", "scopeSpans", "spans", "resource", "attributes", "key", "value", "stringValue",
              "intValue", "traceId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "trace_id", "x",
              "parentSpanId", "parent_span_id"]  # fmt: skip
LEAVES = st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False, allow_infinity=False) | text
KEYS = st.sampled_from(VOCABULARY + ["service.name", "cloud.region", "url.full", "db.system"])
json_values = st.recursive(
    LEAVES | st.sampled_from(["5a" * 16, "SPAN_KIND_CLIENT", "123", "Ol5IQvq0KPdi5uKC5cFlfA=="]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


@SETTINGS
@given(doc=st.dictionaries(st.sampled_from(VOCABULARY), json_values, max_size=3), escape=st.booleans())
def test_random_json_in_otlp_words_agrees(doc, escape, assert_same):
    assert_agrees(dumps(doc, escape), assert_same)


@SETTINGS
@given(data=st.binary(max_size=64) | st.sampled_from([b"", b"{", b'{"', b'{"resourceSpans":[{', b"{}\x00", b'"x"']))
def test_random_bytes_agree(data, assert_same):
    assert_agrees(data, assert_same)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(buf) + 1)
        op = rng.randrange(5)
        if op == 0:
            del buf[i:]
        elif op == 1 and i < len(buf):
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            buf[i:i] = rng.choice([b'"', b"\\", b"\\u", b"{", b"]", b",", b":", b"-", b"0", b"\xc3", b"\xff", b"e9", b" "])
        elif op == 3:
            del buf[i : i + rng.randint(1, 12)]
        else:
            buf[i:i] = buf[i : i + rng.randint(1, 40)]
    return bytes(buf)


def test_mutated_real_requests_agree(workload, sdk_request_bytes, assert_same):
    """2,000 byte-level mutations of real requests (the SDK's encoding and the bench workload)."""
    seeds = [
        orjson.dumps(MessageToDict(ExportTraceServiceRequest.FromString(sdk_request_bytes))),
        dumps(to_doc(workload.make_request(6, 1), hex_ids=True, enum_ints=True, int_numbers=True), escape=True),
    ]
    rng = random.Random(20_260_310)
    decoded_in_c = 0
    for n in range(2000):
        decoded_in_c += assert_agrees(_mutate(rng, seeds[n % 2]), assert_same)
    assert decoded_in_c > 100  # mutations that stay well-formed (e.g. in a string) still take the C path


def test_repeated_decoding_does_not_leak(workload):
    """Accepted, given-up (after escapes filled the arena) and invalid requests, 300 times each:
    the memory still held afterwards does not grow with the number of decodes."""
    from agent.otlp import _jsonwalk

    good = orjson.dumps(MessageToDict(workload.make_request(64, 2))).replace(b'"name":"', b'"name":"\\u00e9\\n')
    given_up = good.replace(b'"name":', b'"name":1,"name":', 1)[:-40] + b'"trace_id": 5}]}]}]}'
    inputs = [good, given_up, good[: len(good) // 2], b"\xff" * 100]

    def run(times: int) -> None:
        for _ in range(times):
            for data in inputs:
                _jsonwalk.decode(data)

    run(20)
    tracemalloc.start()
    try:
        run(10)
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        _jsonwalk.decode(good)
        assert tracemalloc.get_traced_memory()[1] - before > len(good)  # the C allocations are seen
        run(300)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert _jsonwalk.decode(good) is not None and _jsonwalk.decode(given_up) is None
    assert after - before < 64 * 1024, f"{after - before} bytes still held after 1,200 more decodes"


def test_trace_files_decode_as_one_builder_fed_every_line(tmp_path, workload, assert_same):
    """read_trace_file (``carbonspan score``) takes the C walker per line and concatenates; that
    equals the previous decoding, one BatchBuilder fed every parsed line, whatever path each took."""
    from agent.otlp import OtlpDecodeError, read_trace_file
    from agent.otlp.jsonfmt import decode_json_into, parse_json
    from agent.otlp.rules import BatchBuilder

    lines = [
        orjson.dumps(MessageToDict(workload.make_request(8, 1))),
        orjson.dumps(MessageToDict(workload.make_request(8, 2))).replace(b'"traceId"', b'"trace_id"'),  # Python
        dumps(to_doc(workload.make_request(8, 3), True, True, True), escape=True).replace(b'"name":"', b'"name":"\\u00e9'),
    ]
    assert [decode_json_fast(line) is not None for line in lines] == [True, False, True]
    builder = BatchBuilder()
    for line in lines:
        decode_json_into(builder, parse_json(line))
    (tmp_path / "t.ndjson").write_bytes(b"\n".join(lines) + b"\n\n")
    assert_same(read_trace_file(tmp_path / "t.ndjson"), builder.build())
    (tmp_path / "one.json").write_bytes(lines[2])
    assert_same(read_trace_file(tmp_path / "one.json"), decode_json_python(lines[2]))
    (tmp_path / "bad.ndjson").write_bytes(lines[0] + b'\n{"resourceSpans": 5}\n')
    with pytest.raises(OtlpDecodeError, match=r"bad\.ndjson, line 2: resourceSpans: expected a list, got 5$"):
        read_trace_file(tmp_path / "bad.ndjson")


_WITHOUT_EXTENSION = """
import sys, orjson
class Unbuilt:
    def find_spec(self, name, path=None, target=None):
        if name == "agent.otlp._jsonwalk":
            raise ImportError("not built")
sys.meta_path.insert(0, Unbuilt())
from agent.otlp import decode_json, jsonfast
batch = decode_json(sys.stdin.buffer.read())
print(orjson.dumps([jsonfast.FAST_JSON, batch.services, batch.endpoints, batch.start_ns.tolist(),
                    batch.op_class.tolist(), batch.counters, batch.rejected]).decode())
"""


def test_without_the_extension_the_python_walk_decodes_the_same(workload):
    """A machine without a C compiler: ``decode_json`` falls back to the Python walk, same batch."""
    import subprocess
    import sys
    from pathlib import Path

    data = orjson.dumps(MessageToDict(workload.make_request(32, 4)))
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EXTENSION], input=data, capture_output=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2], check=True)  # fmt: skip
    want = decode_json_fast(data)
    assert orjson.loads(done.stdout) == [False, want.services, want.endpoints, want.start_ns.tolist(),
                                         want.op_class.tolist(), want.counters, want.rejected]  # fmt: skip


def _one_span_doc(name: bytes, start: bytes = b'"1700000000000000000"') -> bytes:
    return (b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
            b'{"stringValue":"' + name + b'"}}]},"scopeSpans":[{"spans":[{"traceId":"'
            + b"ab" * 16 + b'","spanId":"' + b"cd" * 8 + b'","name":"' + name
            + b'","startTimeUnixNano":' + start + b',"endTimeUnixNano":"1700000000000000001"}]}]}]}')


@pytest.mark.parametrize("special", [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\ud83d\\ude00", b"\x01",
                                     b"\x1f", b"\x7f", "é".encode(), "😀".encode(), b"\xff",
                                     b"\xc3", b"\xed\xa0\x80", b" ", b"~"])
def test_a_special_byte_at_any_place_of_an_eight_byte_word_is_seen(special, assert_same):
    """The string scan reads eight bytes at a time: a quote, backslash, control character or
    non-ASCII byte must be found at every offset of a word, and at the string's end."""
    valid = special not in (b"\x01", b"\x1f", b"\xff", b"\xc3", b"\xed\xa0\x80")
    for before in range(0, 18):
        for after in (0, 1, 7, 8, 9):
            in_c = assert_agrees(_one_span_doc(b"a" * before + special + b"b" * after), assert_same)
            assert in_c == valid  # valid JSON the C walker decodes itself; the rest is Python's


@pytest.mark.parametrize("start", [b'"0"', b'"-0"', b'"9999999999999999999"', b'"18446744073709551615"',
                                   b'"18446744073709551616"', b'"-1"', b'"+1"', b'"1a"', b'""',
                                   b'"-"', b'"0000000000000000000001"', b'"1700000000000000000"'])
def test_integer_strings_of_every_length_agree(start, assert_same):
    assert_agrees(_one_span_doc(b"svc", start), assert_same)


def _attr_doc(attr: bytes) -> bytes:
    return (b'{"resourceSpans":[{"resource":{"attributes":[' + attr.replace(b"K", b"service.name")
            + b']},"scopeSpans":[{"spans":[{"traceId":"' + b"ab" * 16 + b'","spanId":"'
            + b"cd" * 8 + b'","name":"n","startTimeUnixNano":"1","endTimeUnixNano":"2",'
            b'"attributes":[' + attr.replace(b"K", b"http.method") + b"]}]}]}]}")


@pytest.mark.parametrize("attr", [
    b'{"key":"K","value":{"stringValue":"GET"}}',
    b'{"key":"K","value":{"intValue":"7"}}',
    b'{"key":"K","value":null}',
    b'{"key":"K","value":{"stringValue":"GET"},"extra":1}',
    b'{"key":"K","value":{"stringValue":"GET"},"key":"other"}',
    b'{"key":"K","value":{"stringValue":"GET"},"value":{"stringValue":"PUT"}}',
    b'{"value":{"stringValue":"GET"},"key":"K"}',
    b'{"key":"K","key":"K","value":{"stringValue":"GET"}}',
    b'{"key": "K", "value": {"stringValue": "GET"} }',
    b'{"key":"K","value":{"stringValue":"GET"}   }',
    b'{"key":"http\\u002emethod","value":{"stringValue":"GET"}}',
    b'{"key":"K","value":{"stringValue":1}}',
    b'{"key":"unread.key","value":{"stringValue":1}}',
    b'{"key":"unread.key","value":[1,{"a":"\\u00e9"}]}',
    b'{"key":"unread.key","value":{"stringValue":"1.1"}}',
    b'{"key":"unread.key","value":{"stringValue":"\\u00e9\\n"}}',
    b'{"key":"unread.key","value":{"stringValue":"a\x01b"}}',
    b'{"key":"unread.key","value":{"stringValue":"x","intValue":"1"}}',
    b'{"key":"unread.key","value":{"stringValue":"x" }}',
    b'{"key":"unread.key","value":{"stringValue":"x"',
    b'{"key":"unread.key","value":{"stringValue":null}}',
    b'{"key":"K","value":{"stringValue":"GET"}',
    b'{"key":"K","value":}',
    b'{"key":5,"value":{"stringValue":"GET"}}',
    b'{"key":"K"}',
    b'{"key":"K","value":{"stringValue":"G\\"ET"}},{"key":"K","value":{"stringValue":"PUT"}}',
    b'{}',
])  # fmt: skip
def test_attributes_in_and_out_of_the_common_layout_agree(attr, assert_same):
    """{"key":...,"value":...} in that order and nothing else is read without the member
    loop; every other layout (extra, repeated or reordered members, whitespace, escapes,
    invalid values) must still give the member loop's answer."""
    assert_agrees(_attr_doc(attr), assert_same)
