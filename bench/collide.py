"""Service names chosen against the C Folder's old name-table hash (hash flooding, issue 18).

Up to FOLD_VERSION 14 the Folder (``aggregator/fold/_fold.c``) found a service by an
*unkeyed* hash of its name's bytes, 64-bit FNV-1a, in tables of open addressing by linear
probing whose home slot is the hash's low bits. Anyone who writes an archive could then pick
names that all share a home slot: each lookup walks past every name met before it, and a
line of ~1,000 such names costs ~500,000 probes instead of ~1,500.

FNV-1a's low ``k`` bits depend only on the low ``k`` bits of its state and the byte (the
step is ``(h ^ byte) * prime`` modulo 2^64, the prime odd), so a step is a bijection of the
low bits and can be run backwards: for each 3-character tail the state a prefix must leave
for prefix + tail to hash to 0 in its low ``bits`` is computed once, and each prefix then
takes the tail that fits. ``colliding_names`` gives names of one length whose old hashes
agree in their low 13 bits (one home slot in every table of up to 8,192 slots);
``ordinary_names`` the same prefixes with a fixed tail (the same lengths, no choice).

Used by ``bench/bench_fold_collide.py`` (the cost) and
``tests/aggregator/test_fold_name_table.py`` (the probe counts and the report's bytes).
"""

from __future__ import annotations

from functools import cache

#: FNV-1a 64 (Fowler, Noll, Vo; draft-eastlake-fnv) with the offset basis as _fold.c wrote it:
#: 1469598103934665603, the standard 14695981039346656037 less its last digit (any basis: unkeyed)
FNV_OFFSET = 1469598103934665603
FNV_PRIME = 0x100000001B3
ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"
BITS = 13


def fnv1a(data: bytes) -> int:
    """The old name hash (``_fold.c`` ``name_hash`` up to FOLD_VERSION 14)."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


@cache
def _tails(bits: int) -> dict[int, bytes]:
    """For each low-``bits`` state a prefix may leave: a 3-byte tail taking it to 0 (~99.7 % of states)."""
    mask = (1 << bits) - 1
    inverse = pow(FNV_PRIME, -1, 1 << bits)
    need: dict[int, bytes] = {}
    for a in ALPHABET:
        for b in ALPHABET:
            for c in ALPHABET:
                x = 0  # the state after the tail; run the three steps backwards
                for byte in (c, b, a):
                    x = ((x * inverse) & mask) ^ byte
                need.setdefault(x, bytes((a, b, c)))
    return need


def colliding_names(n: int, bits: int = BITS) -> list[str]:
    """``n`` names ``s<5 digits><3 letters>`` whose old hashes have the same low ``bits`` (0)."""
    need, mask, out, i = _tails(bits), (1 << bits) - 1, [], 0
    while len(out) < n:
        prefix = b"s%05d" % i
        tail = need.get(fnv1a(prefix) & mask)
        if tail is not None:
            out.append((prefix + tail).decode())
        i += 1
    return out


def ordinary_names(names: list[str]) -> list[str]:
    """The same names' prefixes with a fixed tail instead of the chosen one (same lengths)."""
    return [name[:-3] + "zzz" for name in names]
