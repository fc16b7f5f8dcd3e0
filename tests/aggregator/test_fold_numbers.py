"""The byte scan's own pieces (``aggregator/fold/_fold.c``, "from the bytes"): its number reader
and its skip, held to orjson, which reads every line the scan declines.

- ``scan_number``: the double the scan reads from a number token (Clinger's fast path, then
  Eisel-Lemire over a table of 128-bit powers of five, then CPython's PyOS_string_to_double)
  must be the one orjson reads, bit for bit, on every token: random doubles at every
  precision, random digit strings with exponents across and past the table, exact and near
  halfway points between doubles. An int token is read exactly where orjson reads an int of
  at most 19 digits (-2**63 .. 2**64 - 1), and declined (None) elsewhere: below -2**63 orjson
  reads a float, and the scan once gave a wrapped int there.
- ``scan_value``: the skip accepts a text only if orjson reads it (else a line the fold took
  from its bytes would be one the reference calls malformed), and accepts the JSON orjson
  writes (else the byte path would never run).
- the table of powers of five in ``_fold.c`` is the one the formula gives.
"""

from __future__ import annotations

import random
import re
import struct
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.fold.ext import EXT

pytestmark = pytest.mark.skipif(EXT is None, reason="the C fold is not built")

SOURCE = Path(__file__).resolve().parents[2] / "aggregator" / "fold" / "_fold.c"


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _same(text: str) -> None:
    got = EXT.scan_number(text.encode())
    try:
        want = orjson.loads(text)
    except orjson.JSONDecodeError:
        assert got is None, text
        return
    if not any(c in text for c in ".eE"):  # an int token: never a figure
        digits = len(text.lstrip("-"))
        if type(want) is int and digits <= 19:  # read exactly, -2**63 included
            assert type(got) is int and got == want, (text, got, want)
        else:  # past 19 digits, or a float to orjson (below -2**63, above 2**64 - 1): declined
            assert got is None, (text, got, want)
        return
    if got is None:  # declined: allowed only where the reader says it declines (never for these)
        pytest.fail(f"declined {text!r}")
    assert type(got) is float and _bits(got) == _bits(want), (text, got, want)


def _pow5_128(q: int) -> int:
    """fast_float's table entry for 5**q: the power's 128 leading bits (truncated for q >= 0,
    2**b // 5**-q + 1 truncated for q < 0)."""
    if q < 0:
        power5 = 5 ** -q
        z = power5.bit_length() - (1 if power5 & (power5 - 1) == 0 else 0)
        c = 2 ** (z + 127) // power5 + 1 if q >= -27 else 2 ** (2 * z + 128) // power5 + 1
        while c >= 1 << 128:
            c //= 2
        return c
    power5 = 5**q
    while power5 < 1 << 127:
        power5 *= 2
    while power5 >= 1 << 128:
        power5 //= 2
    return power5


def test_the_table_of_powers_of_five_is_the_formulas():
    text = SOURCE.read_text()
    lo, hi = int(re.search(r"#define POW5_MIN \((-?\d+)\)", text)[1]), int(re.search(r"#define POW5_MAX (\d+)", text)[1])
    rows = re.findall(r"\{0x([0-9a-f]{16})u, 0x([0-9a-f]{16})u\}, /\* 5\^(-?\d+) \*/", text)
    assert [int(q) for _, _, q in rows] == list(range(lo, hi + 1))
    for high, low, q in rows:
        assert (int(high, 16) << 64 | int(low, 16)) == _pow5_128(int(q)), q


def test_random_doubles_at_every_precision_read_as_orjson_reads_them():
    rng = random.Random(18)
    for _ in range(30_000):
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if x != x or x in (float("inf"), float("-inf")):
            continue
        _same(repr(x))
        _same(f"{x:.{rng.randint(1, 19)}e}")
        _same(f"{abs(x):.{rng.randint(0, 25)}f}" if abs(x) < 1e30 else repr(x))
    for _ in range(30_000):  # the figures the agent writes: energies and carbon of 1e-15 .. 1e3
        x = rng.uniform(0, 1) * 10.0 ** rng.randint(-15, 3)
        _same(repr(x))


def test_random_digit_strings_across_and_past_the_table_read_as_orjson_reads_them():
    rng = random.Random(19)
    for _ in range(60_000):
        digits = str(rng.randint(1, 10 ** rng.randint(1, 22)))
        cut = rng.randint(0, len(digits))
        mantissa = f"{digits[:cut] or '0'}.{digits[cut:] or '0'}"
        _same(f"{mantissa}e{rng.randint(-360, 330)}")
        _same(f"{mantissa}E+{rng.randint(0, 30)}")
        _same(f"-{mantissa}e-{rng.randint(0, 30)}")
        _same(f"0.{'0' * rng.randint(0, 30)}{digits}")


def test_halfway_points_between_doubles_round_to_even_as_orjson_does():
    rng = random.Random(20)
    for _ in range(20_000):
        x = rng.uniform(0, 1) * 10.0 ** rng.randint(-30, 20)
        nxt = struct.unpack("<d", struct.pack("<Q", _bits(x) + 1))[0]
        mid = (Fraction(x) + Fraction(nxt)) / 2  # exact: a finite decimal
        exact = f"{mid.numerator * 10 ** 80 // mid.denominator}e-80"
        _same(exact)
        sig = str(mid.numerator * 10**80 // mid.denominator).rstrip("0") or "0"
        for n in (17, 18, 19, 20):  # near the halfway point, above and below it
            _same(f"0.{sig[:n]}e{len(str(mid.numerator * 10 ** 80 // mid.denominator)) - 80}")


@pytest.mark.parametrize("text", ["0", "-0", "-0.0", "0.0", "1e15", "1.0000000000000002e15", "5e-324", "1e-400",
                                  "1e400", "-1e400", "1.7976931348623157e308", "1.7976931348623159e308",
                                  "2.2250738585072014e-308", "2.2250738585072011e-308", "9007199254740993.0",
                                  "0.1", "0.30000000000000004", "123456789012345678901234567890.5", "01", "1.",
                                  ".5", "-", "1e", "1e+", "--1", "+1", "1.5e-05", "0e999999", "1" * 309, "1" * 310])
def test_edge_tokens_read_as_orjson_reads_them(text):
    _same(text)


INT_EDGES = [str(v) for v in (-(2**63), -(2**63) - 1, -(2**63) + 1, -(2**63) - 2, -(10**19) + 1, -(10**19),
                               -(2**64) + 1, -(2**64), 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**19 - 1, 10**19, 0, -1)]


@pytest.mark.parametrize("text", INT_EDGES)
def test_int_tokens_at_the_64_bit_edges_read_as_orjson_reads_them_or_are_declined(text):
    _same(text)


def test_an_int_below_minus_two_to_the_63_is_declined_not_wrapped():
    assert EXT.scan_number(b"-9223372036854775808") == -(2**63)
    assert EXT.scan_number(b"-9223372036854775809") is None  # orjson: -9.223372036854776e18; once 2**63 - 1
    assert EXT.scan_number(b"-9999999999999999999") is None  # once 8446744073709551617


@settings(max_examples=2000, deadline=None)
@given(st.integers(-(10**21), 10**21) | st.integers(-(2**64) - 2, 2**64 + 2))
def test_any_int_token_reads_as_orjson_reads_it_or_is_declined(value):
    _same(str(value))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_the_skip_accepts_the_json_orjson_writes(value):
    text = orjson.dumps(value)
    assert EXT.scan_value(text), text


FRAGMENTS = [b"{", b"}", b"[", b"]", b",", b":", b'"a"', b'"\\u00e9"', b'"\\ud800"', b'"\\ud83d\\ude00"', b'"\\x"',
             b'"\xc3\xa9"', b'"\xc3"', b'"\xed\xa0\x80"', b'"\x01"', b"1", b"-0", b"01", b"1.5", b"1e400", b"1e-400",
             b"true", b"tru", b"null", b"nul", b"false", b" ", b"\n", b"\t", b"\x0c", b'"', b"\\", b"NaN", b"Infinity"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=14))
def test_the_skip_accepts_only_what_orjson_reads(parts):
    text = b"".join(parts)
    if EXT.scan_value(text):
        orjson.loads(text)  # raises if the skip accepted what orjson refuses


@settings(max_examples=1000, deadline=None)
@given(JSON, st.integers(0, 10_000), st.integers(0, 255))
def test_a_flipped_byte_is_accepted_only_where_orjson_reads_it(value, at, byte):
    text = bytearray(orjson.dumps(value))
    text[at % len(text)] = byte
    if EXT.scan_value(bytes(text)):
        orjson.loads(bytes(text))


def test_nesting_deeper_than_the_scan_allows_is_declined():
    assert EXT.scan_value(b"[" * 500 + b"]" * 500)
    assert not EXT.scan_value(b"[" * 600 + b"]" * 600)  # orjson reads 1024 levels: the long way decides
