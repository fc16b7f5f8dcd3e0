"""Byte-level mutations of a real request, for the decoders' fuzz tests (tests/otlp)."""

from __future__ import annotations

import random

#: Bytes the protobuf mutator splices in: a 10-byte varint and more, a length past the end,
#: NUL, a group start / end tag.
PROTOBUF_TOKENS: tuple[bytes, ...] = (b"\xff" * 11, b"\x0a\xff\xff\xff\xff\x0f", b"\x00", b"\x0b", b"\x0f")


def mutate(rng: random.Random, data: bytes, tokens: tuple[bytes, ...] = PROTOBUF_TOKENS) -> bytes:
    """``data`` with 1-3 of: cut at a point, one bit flipped, random bytes inserted, a run
    deleted, a run duplicated, one of ``tokens`` inserted."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        i = rng.randrange(len(buf) + 1)
        if op == 0:
            del buf[i:]
        elif op == 1 and buf:
            buf[min(i, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 2:
            buf[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del buf[i : i + rng.randint(1, 16)]
        elif op == 4:
            buf[i:i] = buf[i : i + rng.randint(1, 64)]  # duplicate a run
        else:
            buf[i:i] = rng.choice(tokens)
    return bytes(buf)
