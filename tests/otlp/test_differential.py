"""The fast C decoder, the reference decoder and the JSON decoder agree on every request.

Requests are generated with hypothesis and encoded by hand on the wire so that they can carry
what protobuf objects cannot: unknown fields of every wire type, a resource placed after its
spans, a span name sent twice (the last wins). The JSON forms are produced by protobuf's own
``MessageToDict`` (base64 ids, int64 strings, enum names or numbers), with ids rewritten to
hex as OTLP/JSON requires.
"""

from __future__ import annotations

import base64

import orjson
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from agent.otlp import concat_batches, decode_json
from agent.otlp.fast import decode_protobuf_fast
from agent.otlp.reference import decode_protobuf_reference, parse_request
from agent.otlp.rules import MAX_TIMESTAMP_NS

# ---------------------------------------------------------------- a tiny wire encoder


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, wire_type: int, payload: bytes | int) -> bytes:
    tag = varint(number << 3 | wire_type)
    if wire_type == 0:
        return tag + varint(int(payload))
    if wire_type == 1:
        return tag + int(payload).to_bytes(8, "little")
    if wire_type == 5:
        return tag + int(payload).to_bytes(4, "little")
    assert isinstance(payload, bytes)
    return tag + varint(len(payload)) + payload


UNKNOWN = (field(90, 0, 7), field(91, 1, 2**63), field(92, 2, b"\x08\x01junk"), field(93, 5, 9))

# ---------------------------------------------------------------- strategies

REGIONS = ["eu-west-3", "eu-central-1", "pl", "us-east-1", "EU-West-3", "", "x" * 65, "x" * 64,
           "eu west", "eu-wést-1", "a.b"]  # fmt: skip
STATEMENTS = ["SELECT 1", "  select *", "/* app */ INSERT INTO t", "-- c\nUPDATE t SET a=1",
              "((DELETE", "WITH a AS (SELECT 1) SELECT 1", "SELECTED", "/* open", "-- no newline",
              "", "délete", "\tUpdate x"]  # fmt: skip
OPERATIONS = ["UPDATE", "select", "BATCH INSERT", "BATCH", "BATCH  delete", "BATCH /* x", "HMSET",
              "findAndModify", "INSERTS", "Update"]  # fmt: skip
SPAN_KEYS = ["cloud.region", "db.system", "db.system.name", "db.statement", "db.query.text",
             "db.operation.name", "db.operation",
             "messaging.system", "http.url", "url.full", "server.address", "net.peer.name",
             "http.method", "http.request.method", "http.response.body.size",
             "http.response_content_length", "code.function", "service.name", ""]  # fmt: skip

others = st.sampled_from(
    [
        AnyValue(bool_value=True),
        AnyValue(double_value=1.5),
        AnyValue(bytes_value=b"\x00\xff"),
        AnyValue(array_value=ArrayValue()),
        AnyValue(kvlist_value=KeyValueList()),
        AnyValue(),
        None,  # no value at all
    ]
)
ints = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 1, 10_240, 2**20 + 1])


@st.composite
def key_values(draw: st.DrawFn, keys: list[str]) -> KeyValue:
    key = draw(st.sampled_from(keys))
    if key == "cloud.region":
        strings = st.sampled_from(REGIONS) | st.text(max_size=3)
    elif key in ("db.statement", "db.query.text"):
        strings = st.sampled_from(STATEMENTS) | st.text(max_size=12)
    elif key in ("db.operation.name", "db.operation"):
        strings = st.sampled_from(OPERATIONS) | st.sampled_from(STATEMENTS) | st.text(max_size=8)
    else:
        strings = st.sampled_from(["postgresql", "kafka", "GET", "https://x/y", ""]) | st.text(max_size=6)
    value = draw(strings.map(lambda s: AnyValue(string_value=s)) | ints.map(lambda i: AnyValue(int_value=i)) | others)
    return KeyValue(key=key) if value is None else KeyValue(key=key, value=value)


def _kvs(**attrs: str | int) -> list[KeyValue]:
    return [
        KeyValue(key=k.replace("_", "."), value=AnyValue(int_value=v) if isinstance(v, int) else AnyValue(string_value=v))
        for k, v in attrs.items()
    ]


#: Attribute sets as instrumentations send them, so that every class is drawn often.
PRESETS = [
    [],
    _kvs(db_system="postgresql", db_statement="DELETE FROM t"),
    *[_kvs(**{"db.system.name": "mysql", "db.query.text": q}) for q in STATEMENTS[:6]],
    *[_kvs(**{"db.system.name": "redis", "db.operation.name": o}) for o in OPERATIONS[:5]],
    _kvs(**{"db.system.name": "postgresql", "db.operation.name": "EXECUTE", "db.query.text": "DELETE x"}),
    _kvs(**{"db.system": "mongodb", "db.operation": "update"}),
    _kvs(**{"url.full": "https://a/b", "http.response.body.size": 20_000}),
    _kvs(**{"http.url": "https://a/b", "http.response_content_length": 5}),
    _kvs(**{"net.peer.name": "a", "http.method": "GET"}),
    _kvs(**{"server.address": "a", "http.request.method": "POST", "http.response.body.size": -3}),
    _kvs(**{"messaging.system": "kafka", "url.full": "https://a/b"}),
    _kvs(**{"messaging.system": "rabbitmq"}),
    _kvs(**{"db.system": "redis", "messaging.system": "kafka"}),
    _kvs(**{"db.system.name": "postgresql", "url.full": "https://a/b", "http.method": "GET"}),
]
#: Span kinds: every enum value (0 UNSPECIFIED .. 5 CONSUMER) about equally often, since the
#: database and messaging rules turn on SERVER/CONSUMER, plus out-of-range values.
KINDS = [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, -1, 100, 2**31 - 1]

@st.composite
def kv_bytes(draw: st.DrawFn, kv: KeyValue) -> bytes:
    """A KeyValue on the wire; sometimes with a second key and value, in any field order
    (a merged message: the last key and the last value kind win)."""
    if draw(st.integers(0, 3)) != 0:
        return kv.SerializeToString()
    extra = draw(key_values(["app.noise", "db.statement", "cloud.region"]))
    parts = [field(1, 2, kv.key.encode()), field(1, 2, extra.key.encode())]
    parts += [field(2, 2, x.value.SerializeToString()) for x in (kv, extra) if x.HasField("value")]
    return b"".join(draw(st.permutations(parts)))


timestamps = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, MAX_TIMESTAMP_NS - 1, MAX_TIMESTAMP_NS]) | st.integers(
    1_700_000_000_000_000_000, 1_700_000_000_000_100_000
)


@st.composite
def spans(draw: st.DrawFn) -> bytes:
    good_id = st.binary(min_size=15, max_size=15).map(lambda b: b"\x5a" + b)  # never all zero
    bad_id = st.sampled_from([b"", bytes(16), b"\x01" * 15, b"\x02" * 17])
    trace_id = draw(bad_id if draw(st.integers(0, 9)) == 5 else good_id)
    parts = [
        field(1, 2, trace_id),
        field(2, 2, draw(st.binary(min_size=8, max_size=8))),
        field(5, 2, draw(st.text(max_size=8)).encode()),
        field(6, 0, draw(st.sampled_from(KINDS))),
        field(7, 1, draw(timestamps)),
        field(8, 1, draw(timestamps)),
    ]
    kvs = draw(st.sampled_from(PRESETS)) + draw(st.lists(key_values(SPAN_KEYS), max_size=6))
    parts += [field(9, 2, draw(kv_bytes(kv))) for kv in draw(st.permutations(kvs))]
    # parent_span_id: none (a root), a span id, or not one (all zero, another length); sometimes
    # twice, the last one winning (a root is a span whose last parent_span_id is empty)
    parents = st.binary(min_size=8, max_size=8) | st.sampled_from([b"", bytes(8), b"\x01" * 7, b"\x02" * 9, b"\x03" * 16])
    parts += [field(4, 2, draw(parents)) for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2])))]
    if draw(st.booleans()):
        parts.append(field(5, 2, b"renamed"))  # a repeated singular field: the last one wins
    parts += draw(st.lists(st.sampled_from(UNKNOWN), max_size=2))
    return b"".join(draw(st.permutations(parts)))


@st.composite
def resource_spans(draw: st.DrawFn) -> bytes:
    kvs = draw(st.lists(key_values(["service.name", "cloud.region", "host.name"]), max_size=4))
    if draw(st.booleans()):
        kvs.append(KeyValue(key="service.name", value=AnyValue(string_value=draw(st.sampled_from(["cart", "pay", "Cart"])))))
    resource = b"".join(field(1, 2, kv.SerializeToString()) for kv in kvs)
    scopes = [
        field(2, 2, field(1, 2, b"\x0a\x03lib") + b"".join(field(2, 2, s) for s in draw(st.lists(spans(), max_size=4))))
        for _ in range(draw(st.integers(0, 2)))
    ]
    parts = [field(1, 2, resource), *scopes, *draw(st.lists(st.sampled_from(UNKNOWN), max_size=1))]
    if draw(st.booleans()):
        parts.append(parts.pop(0))  # the resource after its spans
    return b"".join(parts)


requests = st.lists(resource_spans(), max_size=3).map(lambda rs: b"".join(field(1, 2, r) for r in rs))

# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=requests)
def test_fast_decoder_equals_reference(data, assert_same):
    assert_same(decode_protobuf_fast(data), decode_protobuf_reference(data))


def _json_doc(data: bytes, hex_ids: bool, enum_ints: bool) -> dict:
    doc = MessageToDict(parse_request(data), use_integers_for_enums=enum_ints)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if hex_ids and key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=requests, hex_ids=st.booleans(), enum_ints=st.booleans())
def test_json_decoder_equals_reference(data, hex_ids, enum_ints, assert_same):
    doc = _json_doc(data, hex_ids, enum_ints)
    assert_same(decode_json(orjson.dumps(doc)), decode_protobuf_reference(data))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=requests, second=requests)
def test_concat_equals_decoding_the_concatenated_request(first, second, assert_same):
    """Two serialized requests back to back are one request holding both (protobuf merge)."""
    assert_same(
        concat_batches([decode_protobuf_fast(first), decode_protobuf_fast(second)]),
        decode_protobuf_fast(first + second),
    )


def test_every_span_kind_with_every_preset_agrees(assert_same):
    """Exhaustively, not by chance: each kind x each attribute preset, C vs reference vs JSON."""
    spans = [
        field(1, 2, b"\x5a" * 16) + field(6, 0, kind) + b"".join(field(9, 2, kv.SerializeToString()) for kv in kvs)
        for kind in sorted(set(KINDS))
        for kvs in PRESETS
    ]
    data = field(1, 2, field(2, 2, b"".join(field(2, 2, s) for s in spans)))
    want = decode_protobuf_reference(data)
    assert len(want) == len(set(KINDS)) * len(PRESETS)
    # SERVER/CONSUMER spans receive operations their callers counted: requests, never I/O.
    assert want.is_entry.sum() == 2 * len(PRESETS) and not want.op_class[want.is_entry].any()
    assert want.op_class[~want.is_entry].any()
    assert_same(decode_protobuf_fast(data), want)
    for hex_ids in (False, True):
        for enum_ints in (False, True):
            assert_same(decode_json(orjson.dumps(_json_doc(data, hex_ids, enum_ints))), want)


def test_workload_requests_agree(workload, assert_same):
    for seed in range(3):
        data = workload.make_request_bytes(512, seed)
        assert_same(decode_protobuf_fast(data), decode_protobuf_reference(data))


def test_sdk_encoded_request_agrees(sdk_request_bytes, assert_same):
    assert_same(decode_protobuf_fast(sdk_request_bytes), decode_protobuf_reference(sdk_request_bytes))


def test_fast_decoder_reads_any_buffer(sdk_request_bytes, assert_same):
    want = decode_protobuf_fast(sdk_request_bytes)
    assert_same(decode_protobuf_fast(bytearray(sdk_request_bytes)), want)
    assert_same(decode_protobuf_fast(memoryview(sdk_request_bytes)), want)


def test_a_wanted_key_after_a_skipped_value_is_read():
    """The C decoder skips values of ignored keys; a later wanted key makes it read them."""
    statement = AnyValue(string_value="INSERT INTO t").SerializeToString()
    kv = field(1, 2, b"app.noise") + field(2, 2, statement) + field(1, 2, b"db.statement")
    db = KeyValue(key="db.system", value=AnyValue(string_value="pg")).SerializeToString()
    span = field(1, 2, b"\x01" * 16) + field(6, 0, 3) + field(9, 2, db) + field(9, 2, kv)
    data = field(1, 2, field(2, 2, field(2, 2, span)))
    want = decode_protobuf_reference(data)
    assert want.op_class.tolist() == [2]  # OP_SQL_INSERT
    assert decode_protobuf_fast(data).op_class.tolist() == [2]


def test_decoding_in_threads_gives_the_same_batches(workload, assert_same):
    """The C scan runs without the GIL (the gRPC receiver decodes on several threads)."""
    from concurrent.futures import ThreadPoolExecutor

    payloads = [workload.make_request_bytes(256, seed) for seed in range(4)]
    want = [decode_protobuf_fast(p) for p in payloads]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(decode_protobuf_fast, payloads * 8))
    for i, batch in enumerate(got):
        assert_same(batch, want[i % 4])


def _kv_layouts(key: bytes, value: bytes) -> list[bytes]:
    """One KeyValue written in every layout the C decoder tells apart: the one-step layout
    (key, then value, one-byte lengths, nothing else) and each way out of it."""
    k, v = field(1, 2, key), field(2, 2, value)
    assert len(key) < 128
    return [
        k + v,  # the one-step layout
        k + field(2, 2, b""),  # an empty value: still one step
        k,  # no value: present, not a string
        v + k,  # value first
        k + v + UNKNOWN[0],  # a trailing unknown field
        UNKNOWN[1] + k + v,  # a leading one
        k + v + k,  # the key twice
        k + v + field(2, 2, AnyValue(int_value=7).SerializeToString()),  # the value twice
        field(1, 2, b"k" * 128) + v,  # a two-byte key length (an ignored key)
        k + field(2, 2, AnyValue(string_value="x" * 200).SerializeToString()),  # two-byte value length
        b"\x0a" + bytes([0x80 | len(key), 0]) + key + v,  # a key length in two bytes (not minimal)
        k + b"\x12\x00",  # an empty value as written by hand
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    service=st.sampled_from(["checkout", "", "s" * 130, "svc-00042"]),
    region=st.sampled_from(REGIONS),
    statement=st.sampled_from(STATEMENTS + ["SELECT " + "x" * 140]),
)
def test_every_key_value_layout_agrees(service, region, statement, assert_same):
    """Resource attributes (service.name, cloud.region and ignored ones) and span attributes,
    each in every layout of ``_kv_layouts``: the one-step path and the general loop give the
    reference decoder's batch."""
    def s(text: str) -> bytes:
        return AnyValue(string_value=text).SerializeToString()

    for i, (svc_kv, reg_kv, noise_kv, db_kv) in enumerate(zip(
            _kv_layouts(b"service.name", s(service)), _kv_layouts(b"cloud.region", s(region)),
            _kv_layouts(b"host.name", s("h" * 200)), _kv_layouts(b"db.statement", s(statement)),
            strict=True)):
        resource = b"".join(field(1, 2, kv) for kv in (noise_kv, svc_kv, reg_kv, noise_kv))
        system = KeyValue(key="db.system", value=AnyValue(string_value="pg")).SerializeToString()
        span = (field(1, 2, bytes([i + 1]) * 16) + field(5, 2, b"op") + field(6, 0, 3)
                + field(9, 2, system) + field(9, 2, db_kv) + field(9, 2, noise_kv))
        data = field(1, 2, field(1, 2, resource) + field(2, 2, field(2, 2, span)))
        assert_same(decode_protobuf_fast(data), decode_protobuf_reference(data))


def test_the_c_decoders_strings_hash_as_python_hashes_them(workload) -> None:
    """The C decoders store each ASCII name's hash, the SipHash interning computed, in the str
    (so that scoring and the window's lookups do not compute it again): every service, region
    and endpoint name of a fan-in request, in protobuf and in OTLP/JSON, hashes as a fresh
    copy of itself does, ASCII and not, a short table and a long one."""
    from google.protobuf.json_format import MessageToDict as to_dict

    from agent.otlp.jsonfast import decode_json_fast

    for services in (None, 10_000):
        req = workload.make_request(512, seed=3, services=services)
        req.resource_spans[0].resource.attributes[0].value.string_value = "sérvice-ünïcødé"
        body = req.SerializeToString()
        batches = [decode_protobuf_fast(body),
                   decode_json_fast(orjson.dumps(to_dict(req, use_integers_for_enums=True)))]
        assert decode_protobuf_fast(body).services == decode_protobuf_reference(body).services
        for batch in batches:
            assert batch is not None
            names = [*batch.services, *batch.regions, *batch.endpoints]
            assert len(batch.services) > (8 if services else 1)
            for name in names:
                assert hash(name) == hash(name.encode("utf-8", "surrogatepass").decode(
                    "utf-8", "surrogatepass")), name
