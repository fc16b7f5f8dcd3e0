"""The C Folder's name tables against hash flooding (``_fold.c``, "the name tables' hash").

The Folder finds a line's services in a table of open addressing whose home slot is a hash of
the name's bytes, and checks a line for a name twice in another. Up to FOLD_VERSION 14 that
hash was FNV-1a, unkeyed: names chosen against it (``bench/collide.py``) all share a home
slot, and each lookup walks every one met before it (bench fold_collide: 927 against 300
us/line). Now it is SipHash-1-3 under a key drawn per process from os.urandom. Proven here,
without a clock:

- the C hash is SipHash-1-3 (against a Python SipHash checked on the paper's test vector and
  on CPython's own ``hash(bytes)``, which is SipHash-1-3 under the zero key with
  PYTHONHASHSEED=0), under a key that differs from process to process, PYTHONHASHSEED or not;
- the names that share one home slot under the old hash, folded by the Folder, cost it a
  fraction of a probe per lookup and a short longest walk (the Folder's own counters), where
  the old hash's table, replayed here in Python on the same lookups, walks hundreds per lookup;
- the report of that archive is the reference fold's, byte for byte.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from aggregator.fold.ext import EXT
from aggregator.fold.fast import fold_raw, folder
from tests.aggregator.test_fold_c_edges import HOURS, _check, _dumps, _state, line

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench is not an installed package
    sys.path.append(str(REPO))

from bench.collide import BITS, colliding_names, fnv1a  # noqa: E402

M64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & M64


def siphash(key: bytes, data: bytes, c: int = 1, d: int = 3) -> int:
    """SipHash-c-d (Aumasson and Bernstein, 2012), written from the paper."""
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n: int) -> None:
        for _ in range(n):
            v[0] = (v[0] + v[1]) & M64; v[1] = _rotl(v[1], 13) ^ v[0]; v[0] = _rotl(v[0], 32)  # noqa: E702
            v[2] = (v[2] + v[3]) & M64; v[3] = _rotl(v[3], 16) ^ v[2]  # noqa: E702
            v[0] = (v[0] + v[3]) & M64; v[3] = _rotl(v[3], 21) ^ v[0]  # noqa: E702
            v[2] = (v[2] + v[1]) & M64; v[1] = _rotl(v[1], 17) ^ v[2]; v[2] = _rotl(v[2], 32)  # noqa: E702

    whole = len(data) - len(data) % 8
    blocks = [int.from_bytes(data[i:i + 8], "little") for i in range(0, whole, 8)]
    blocks.append(int.from_bytes(data[whole:], "little") | (len(data) & 0xFF) << 56)
    for m in blocks:
        v[3] ^= m
        rounds(c)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(d)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def test_the_python_siphash_is_the_papers():
    # the paper's Appendix A: SipHash-2-4, key 00 01 .. 0f, message 00 01 .. 0e
    assert siphash(bytes(range(16)), bytes(range(15)), 2, 4) == 0xA129CA6149BE45E5


def test_the_python_siphash13_is_cpythons_hash_of_bytes():
    # CPython 3.11+ hashes bytes by SipHash-1-3 (sys.hash_info.algorithm); PYTHONHASHSEED=0
    # sets its key to zero bytes. Py_hash_t is signed, and -1 is never a hash (it becomes -2).
    assert sys.hash_info.algorithm == "siphash13"
    samples = [bytes(range(n)) for n in range(1, 40)] + [b"svc-0001", b"s00000cpm", "é".encode() * 9]
    out = subprocess.run([sys.executable, "-c", "import sys; print([hash(bytes.fromhex(h)) for h in sys.argv[1:]])",
                          *(s.hex() for s in samples)], env={**os.environ, "PYTHONHASHSEED": "0"},
                         capture_output=True, text=True, check=True).stdout
    signed = [h - (1 << 64) if h >> 63 else h for h in (siphash(bytes(16), s) for s in samples)]
    assert eval(out) == [-2 if h == -1 else h for h in signed]


def test_the_c_name_hash_is_siphash13_under_the_key_given():
    assert EXT is not None
    rng = random.Random(14)
    for n in [*range(0, 33), 63, 64, 65, 255, 256, 300]:
        for _ in range(4):
            key, data = rng.randbytes(16), rng.randbytes(n)
            assert EXT.name_hash(data, key) == siphash(key, data), (key, data)


def _process_hashes(seed: str | None) -> tuple[int, int]:
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    code = ("from aggregator.fold.ext import EXT; print(EXT.name_hash(b'svc-0001'), EXT.name_hash(b'svc-0001'), "
            "EXT.name_hash(b'svc-0001', bytes(16)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    first, again, zero = map(int, out)
    assert first == again  # one key for the process's life
    assert zero == siphash(bytes(16), b"svc-0001")
    return first, zero


def test_the_key_is_drawn_per_process_and_not_from_pythonhashseed():
    assert EXT is not None
    mine = EXT.name_hash(b"svc-0001")
    for seed in (None, "0", "0", "12345"):
        theirs, zero = _process_hashes(seed)
        assert theirs not in (mine, zero)  # another process, another key (2**-64 to be equal)
        mine = theirs


def _old_table_probes(names_per_line: list[list[str]]) -> tuple[int, int]:
    """The old name table replayed in Python: the FNV-1a homes, linear probing, the table grown
    as _fold.c grows it (x2 from 128 while slots * 2 > size); per lookup the slots stepped past
    the home, as Folder.probes counts them (name table only, so a lower bound). (total, max)."""
    table: list[str | None] = [None] * 128
    total = longest = held = 0
    for names in names_per_line:
        for name in names:
            mask, i, steps = len(table) - 1, fnv1a(name.encode()) & (len(table) - 1), 0
            while table[i] is not None and table[i] != name:
                i, steps = (i + 1) & mask, steps + 1
            total, longest = total + steps, max(longest, steps)
            if table[i] is None:
                held += 1
                if held * 2 > len(table):
                    old = [n for n in table if n is not None]
                    table = [None] * (len(table) * 2)
                    for n in old:
                        j = fnv1a(n.encode()) & (len(table) - 1)
                        while table[j] is not None:
                            j = (j + 1) & (len(table) - 1)
                        table[j] = n
                    mask, i = len(table) - 1, fnv1a(name.encode()) & (len(table) - 1)
                    while table[i] is not None:
                        i = (i + 1) & mask
                table[i] = name
    return total, longest


def _flood(lines: int = 6, per_line: int = 700) -> list[list[str]]:
    pool = colliding_names(1200)
    rng = random.Random(18)
    return [rng.sample(pool, per_line) for _ in range(lines)]


def test_names_chosen_against_the_old_hash_spread_under_the_keyed_one():
    assert EXT is not None
    pool = colliding_names(1200)
    assert len({fnv1a(n.encode()) & ((1 << BITS) - 1) for n in pool}) == 1  # one home under the old hash
    homes = {EXT.name_hash(n.encode()) & 4095 for n in pool}  # 1,200 names in the Folder's 4,096 slots
    assert len(homes) > 900  # ~1,040 expected at random


def test_the_folder_folds_the_flood_with_short_probes_and_the_references_report():
    assert EXT is not None
    draws = _flood()
    lines = [_dumps(line(i, names, dict.fromkeys(names, '"scaphandre_rapl"')), []) for i, names in enumerate(draws)]
    state = _state({})
    byte_folder = folder(state)
    for raw in lines:
        assert fold_raw(state, raw, HOURS.start, HOURS.end, byte_folder) is not None
    assert byte_folder.folded == len(lines)
    # each entry: one lookup in the line's duplicate check and one in the name table
    assert byte_folder.lookups == 2 * sum(map(len, draws))
    old_total, old_longest = _old_table_probes(draws)
    assert old_total / byte_folder.lookups > 100 and old_longest > 800  # what the old hash did (name table alone)
    # what the keyed hash does: ~0.4 probes per lookup at the tables' load (<= 1/2), a longest walk of ~15
    assert byte_folder.probes / byte_folder.lookups < 2, (byte_folder.probes, byte_folder.lookups)
    assert byte_folder.max_probe < 64, byte_folder.max_probe
    # and the report is the reference's, byte for byte (engine both ways, and line by line)
    assert _check(lines, {}) == len(lines)
    assert _check(lines, {"max_services": 500}) == len(lines)  # past the cap: dropped entries too
