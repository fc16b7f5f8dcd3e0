"""RFC 6962 / RFC 9162 Merkle trees over a log's lines: roots, inclusion and consistency proofs.

The hashing is RFC 9162 §2.1.1 (the same as RFC 6962 §2.1)::

    MTH({})      = SHA-256()                         (the empty tree)
    leaf hash    = SHA-256(0x00 || entry)
    node hash    = SHA-256(0x01 || left || right)
    MTH(D[n])    = node(MTH(D[0:k]), MTH(D[k:n]))    k = the largest power of two < n

so a tree's left subtree is always perfect. An archive's leaf ``i`` is the ``i``-th window line
of the agent's chain, as the exact bytes on disk without its newline (docs/archive-format.md).

:class:`MerkleTree` stores only the hashes of *complete* subtrees (level ``k`` holds
``size >> k`` of them, one ``bytearray`` per level), so appending is amortised O(1), any root
or proof is O(log² n), and memory is about 64 bytes per leaf. The verifiers
(:func:`root_from_inclusion`, :func:`verify_consistency`) are the RFC 9162 §2.1.3.2 and
§2.1.4.2 algorithms and use no tree at all: they are what a witness or an auditor runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof does not prove what it claims (or cannot be made for those sizes)."""


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """An append-only RFC 6962 tree of leaf hashes."""

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self.size = 0
        for h in leaf_hashes:
            self.append_hash(h)

    def append(self, entry: bytes) -> int:
        """Add ``entry`` (raw leaf data) as the next leaf; returns its index."""
        return self.append_hash(leaf_hash(entry))

    def append_hash(self, h: bytes) -> int:
        if len(h) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, not {len(h)}")
        index = self.size
        self._levels[0] += h
        self.size += 1
        level, n = 0, self.size
        while n % 2 == 0:  # the new node completed a pair: its parent is complete too
            row = self._levels[level]
            parent = node_hash(bytes(row[-2 * HASH_SIZE : -HASH_SIZE]), bytes(row[-HASH_SIZE:]))
            level, n = level + 1, n // 2
            if level == len(self._levels):
                self._levels.append(bytearray())
            self._levels[level] += parent
        return index

    def leaf(self, index: int) -> bytes:
        return self._node(0, index)

    def _node(self, level: int, index: int) -> bytes:
        return bytes(self._levels[level][index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for ``0 <= start < end <= size``, as the tree of size ``end`` has it."""
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:  # a complete, aligned subtree: stored
            return self._node(n.bit_length() - 1, start // n)
        k = _split(n)
        return node_hash(self.subtree(start, start + k), self.subtree(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        self._check_size(size)
        return EMPTY_ROOT if size == 0 else self.subtree(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 PATH(index, D[size])."""
        size = self.size if size is None else size
        self._check_size(size)
        if not 0 <= index < size:
            raise ProofError(f"leaf {index} is not in a tree of size {size}")
        proof: list[bytes] = []
        start, end = 0, size
        while end - start > 1:  # walk down, collecting the sibling of each subtree we enter
            k = _split(end - start)
            if index < start + k:
                proof.append(self.subtree(start + k, end))
                end = start + k
            else:
                proof.append(self.subtree(start, start + k))
                start += k
        return proof[::-1]

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 PROOF(old, D[new])."""
        new = self.size if new is None else new
        self._check_size(new)
        if not 0 <= old <= new:
            raise ProofError(f"no consistency proof from size {old} to size {new}")
        if old in (0, new):
            return []
        proof: list[bytes] = []
        start, end, complete = 0, new, True
        m = old
        while m != end - start:
            k = _split(end - start)
            if m <= k:
                proof.append(self.subtree(start + k, end))
                end = start + k
            else:
                proof.append(self.subtree(start, start + k))
                start, m, complete = start + k, m - k, False
        if not complete:
            proof.append(self.subtree(start, end))
        return proof[::-1]

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise ProofError(f"the tree has {self.size} leaves, not {size}")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` yields for ``leaf`` at ``index`` (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != HASH_SIZE or sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows ``leaf`` at ``index`` under ``root``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"leaf {index} is not in the tree of size {size} with that root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows the tree of size ``new`` with ``new_root``
    extends the tree of size ``old`` with ``old_root`` (RFC 9162 §2.1.4.2)."""
    if not 0 <= old <= new:
        raise ProofError(f"a tree of size {new} cannot extend one of size {old}")
    if old == new:
        if proof or old_root != new_root:
            raise ProofError("two checkpoints of one size must have the same root and no proof")
        return
    if old == 0:
        if proof:
            raise ProofError("the empty tree needs an empty consistency proof")
        return
    if not proof or any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("the consistency proof is empty or malformed")
    path = list(proof)
    if old & (old - 1) == 0:  # an exact power of two: the old root is itself a node of the path
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ProofError(f"the tree of size {new} does not extend the tree of size {old}")
