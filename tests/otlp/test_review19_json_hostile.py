"""Review 19: the C OTLP/JSON walker (SWAR strings, 19-digit integers without per-digit checks,
the {"key":...,"value":...} fast path) against the Python walk, on attribute text built byte by
byte: members extra, missing, repeated and reordered, whitespace anywhere, escapes at every
offset of keys and values (\\u0000, pairs, lone surrogates), raw invalid UTF-8, intValues of 18
to 21 digits as strings and numbers at and past the int64/uint64 bounds, deep nesting.

decode_json (C first) must give the Python walk's batch or its exception and message, and what
the C walker accepts on its own must be what the Python walk decodes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_agree import assert_agrees

from agent.otlp.jsonfmt import decode_json

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: keys some rule reads (a string or an int is stored), and one no rule reads
KEYS = ["service.name", "cloud.region", "http.method", "http.request.method", "db.system",
        "db.statement", "http.response.body.size", "http.response_content_length", "server.address",
        "unread.key"]  # fmt: skip
INTS = ["0", "-0", "7", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
        "-9223372036854775809", "999999999999999999", "9999999999999999999", "-9999999999999999999",
        "18446744073709551615", "18446744073709551616", "99999999999999999999", "123456789012345678901",
        "0000000000000000000007", "-", "", "+1", "1e3", "1.0", " 1", "1 ", "٣"]  # fmt: skip
RAW = [b"\x00", b"\x1f", b"\x7f", b"\xff", b"\xc3", b"\xc3\xa9", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80",
       b"\xf4\x90\x80\x80", b"\xe0\x80\xaf", b"\xc0\xaf"]  # fmt: skip
ESCAPES = [b"\\u0000", b'\\"', b"\\\\", b"\\/", b"\\b", b"\\u00e9", b"\\ud83d\\ude00", b"\\ud800",
           b"\\udc00", b"\\ud800\\u0041", b"\\u12", b"\\x41", b"\\U0041", b"\\u002e", b"\\u0065"]  # fmt: skip


@st.composite
def json_text(draw: st.DrawFn, plain: str) -> bytes:
    """``plain`` as a JSON string's bytes, with special bytes and escapes at any offsets."""
    out = plain.encode()
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3]))):
        at = draw(st.integers(0, len(out)))
        kind = draw(st.integers(0, 2))
        if kind == 0:  # an escape of the very character there (the same key, escaped)
            if at < len(out) and 0x20 <= out[at] < 0x7F and out[at] not in b'"\\':
                out = out[:at] + b"\\u%04x" % out[at] + out[at + 1:]
        elif kind == 1:
            out = out[:at] + draw(st.sampled_from(ESCAPES)) + out[at:]
        else:
            out = out[:at] + draw(st.sampled_from(RAW)) + out[at:]
    return b'"' + out + b'"'


def ws(draw: st.DrawFn) -> bytes:
    return draw(st.sampled_from([b"", b"", b"", b" ", b"\n\t", b"\r\n "]))


@st.composite
def any_values(draw: st.DrawFn, depth: int = 0) -> bytes:
    kind = draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 3, 4, 5] + ([6, 7] if depth < 3 else [])))
    if kind == 0:
        return b"null"
    if kind == 1:
        return b'{"stringValue":' + draw(json_text(draw(st.sampled_from(["GET", "eu-west-3", "x" * 9, ""])))) + b"}"
    if kind == 2:
        i = draw(st.sampled_from(INTS))
        quoted = draw(st.booleans())
        return b'{"intValue":' + (draw(json_text(i)) if quoted else i.encode() or b"0") + b"}"
    if kind == 3:  # members in any order, repeated, null, extra
        members = draw(st.lists(st.sampled_from([
            b'"stringValue":"PUT"', b'"stringValue":null', b'"intValue":"12"', b'"intValue":12',
            b'"intValue":null', b'"boolValue":true', b'"doubleValue":1.5e300', b'"doubleValue":1e999',
            b'"arrayValue":{"values":[{"stringValue":"x"}]}', b'"string_value":"x"', b'"extra":{}',
        ]), max_size=4))
        return b"{" + b",".join(ws(draw) + m + ws(draw) for m in members) + b"}"
    if kind == 4:
        return draw(st.sampled_from([b"1", b'"s"', b"[]", b"true", b"{", b"{}", b"nul", b"-", b"[1,]"]))
    if kind == 5:
        deep = draw(st.sampled_from([1, 5, 80, 95, 1100]))
        return b'{"arrayValue":' + b"[" * deep + b"]" * deep + b"}"
    inner = draw(any_values(depth + 1))  # 6, 7: nested
    return b'{"kvlistValue":{"values":[{"key":"k","value":' + inner + b"}]}}"


@st.composite
def attributes(draw: st.DrawFn) -> bytes:
    key = draw(json_text(draw(st.sampled_from(KEYS))))
    value = draw(any_values())
    layout = draw(st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5, 6]))
    if layout == 0:  # the exporters' layout, the fast path
        return b'{"key":' + key + b',"value":' + value + b"}"
    members = {1: [b'"value":' + value, b'"key":' + key],
               2: [b'"key":' + key],
               3: [b'"key":' + key, b'"value":' + value, b'"extra":[1,{"a":"b"}]'],
               4: [b'"key":' + key, b'"value":' + value, b'"key":"other"'],
               5: [b'"key":' + key, b'"value":' + value, b'"value":null'],
               6: [b'"value":' + value]}[layout]
    return b"{" + b",".join(ws(draw) + m + ws(draw) for m in members) + ws(draw) + b"}"


def _doc(resource_attrs: list[bytes], span_attrs: list[bytes]) -> bytes:
    return (b'{"resourceSpans":[{"resource":{"attributes":[' + b",".join(resource_attrs)
            + b']},"scopeSpans":[{"spans":[{"traceId":"' + b"ab" * 16 + b'","spanId":"' + b"cd" * 8
            + b'","name":"n","startTimeUnixNano":"1700000000000000000","endTimeUnixNano":'
            b'"1700000000000000100","attributes":[' + b",".join(span_attrs) + b"]}]}]}]}")


@SETTINGS
@given(res=st.lists(attributes(), max_size=2), span=st.lists(attributes(), max_size=3))
def test_hostile_attribute_text_agrees_with_the_python_walk(res, span, assert_same):
    assert_agrees(_doc(res, span), assert_same)


@pytest.mark.parametrize("value", INTS)
@pytest.mark.parametrize("quoted", [True, False])
def test_every_integer_form_of_a_read_int_attributeassert_agrees(value, quoted, assert_same):
    """http.response.body.size is read as an int: 18-21 digits, at and past int64 and uint64,
    signs, leading zeros, floats and non-ASCII digits, as a string and as a JSON number."""
    text = b'"' + value.encode() + b'"' if quoted else value.encode()
    attr = b'{"key":"http.response.body.size","value":{"intValue":' + text + b"}}"
    in_c = assert_agrees(_doc([b'{"key":"service.name","value":{"stringValue":"svc"}}'], [attr]), assert_same)
    digits = value.lstrip("-")
    fits = digits.isascii() and digits.isdigit() and -(2**63) <= int(value) < 2**63
    if fits and (quoted or not value.startswith(("0", "-0")) or value in ("0", "-0")):
        assert in_c, "a valid int64 intValue must be decoded by the C walker"


def test_a_key_escaped_at_every_offset_is_the_same_key(assert_same):
    """service.name with each one of its characters written as \\u00XX (and all of them): the
    same key to the C walker as to the Python walk, in the fast layout and the member loop."""
    key = "service.name"
    forms = [key[:i] + f"\\u{ord(key[i]):04x}" + key[i + 1:] for i in range(len(key))]
    forms.append("".join(f"\\u{ord(c):04x}" for c in key))
    for form in forms:
        for layout in (b'{"key":"%s","value":{"stringValue":"Svc-\\u00e9"}}',
                       b'{"value":{"stringValue":"Svc-\\u00e9"},"key":"%s"}'):
            attr = layout.replace(b"%s", form.encode())
            assert assert_agrees(_doc([attr], []), assert_same), form
            batch = decode_json(_doc([attr], []))
            assert list(batch.services) == ["Svc-é"]
