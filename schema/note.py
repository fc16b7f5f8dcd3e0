"""C2SP signed notes (c2sp.org/signed-note), Ed25519 keys, and tlog-cosignature/v1 cosignatures.

A signed note is UTF-8 text ending in a newline, a blank line, then one signature line per
signer: ``— <key name> base64(key ID (4 bytes, big-endian) || signature)``. The key ID is
``SHA-256(name || 0x0A || type || public key)[:4]`` with type ``0x01`` for Ed25519 over the
note text, and ``0x04`` for a timestamped Ed25519 witness cosignature, whose signature is
``u64 timestamp (big-endian) || Ed25519 signature`` over
``"cosignature/v1\\ntime <timestamp>\\n" || note text``.

Keys are written in the Go ``golang.org/x/mod/sumdb/note`` text forms, so standard tooling
reads them: a verifier key ``<name>+<key ID hex>+base64(type || public key)`` and a signer
key ``PRIVATE+KEY+<name>+<key ID hex>+base64(type || 32-byte seed)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
SIG_PREFIX = "\u2014 "  # em dash, space
MAX_SIGNATURES = 64  # the spec asks verifiers to accept at least 16
MAX_NOTE_BYTES = 1 << 16
COSIGNATURE_BYTES = 8 + 64  # a cosignature/v1 signature after its key ID: timestamp, Ed25519


class NoteError(ValueError):
    """A note, key or signature is malformed or does not verify; the message says which."""


def key_id(name: str, sig_type: int, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{data[:40]!r} is not standard base64") from None


@dataclass(frozen=True, slots=True)
class Verifier:
    """A public key that checks one signer's note signatures (type 0x01 or 0x04)."""

    name: str
    sig_type: int
    public: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.public)

    def encode(self) -> str:
        raw = base64.b64encode(bytes([self.sig_type]) + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{raw}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)
        if len(parts) != 3 or len(parts[1]) != 8:
            raise NoteError(f"verifier key {text[:60]!r} is not '<name>+<8 hex digits>+<base64>'")
        name, hex_id, raw = parts
        _check_name(name)
        blob = _b64(raw)
        if len(blob) != 33 or blob[0] not in (ED25519, COSIGNATURE_V1):
            raise NoteError(f"verifier key for {name!r} is not an Ed25519 (0x01) or cosignature "
                            "(0x04) key of 32 bytes")
        v = cls(name, blob[0], blob[1:])
        if v.key_id.hex() != hex_id.lower():
            raise NoteError(f"verifier key for {name!r} says key ID {hex_id} but its key hashes "
                            f"to {v.key_id.hex()}: the key was mangled")
        return v

    def check(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Signer:
    """An Ed25519 private key under a name; ``sig_type`` 0x01 signs notes, 0x04 cosigns."""

    name: str
    seed: bytes
    sig_type: int = ED25519

    @classmethod
    def generate(cls, name: str, sig_type: int = ED25519) -> Signer:
        _check_name(name)
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls(name, seed, sig_type)

    @property
    def _key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def verifier(self) -> Verifier:
        pub = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return Verifier(self.name, self.sig_type, pub)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def encode(self) -> str:
        raw = base64.b64encode(bytes([self.sig_type]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{raw}"

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key is 'PRIVATE+KEY+<name>+<key ID>+<base64>' "
                            "(made by 'carbonspan keys generate')")
        _, _, name, hex_id, raw = parts
        _check_name(name)
        blob = _b64(raw)
        if len(blob) != 33 or blob[0] not in (ED25519, COSIGNATURE_V1):
            raise NoteError(f"signer key for {name!r} is not an Ed25519 key")
        signer = cls(name, blob[1:], blob[0])
        if signer.verifier.key_id.hex() != hex_id.lower():
            raise NoteError(f"signer key for {name!r} does not match its key ID {hex_id}")
        return signer


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    key_id: bytes
    blob: bytes  # the signature bytes after the key ID

    def line(self) -> str:
        return f"{SIG_PREFIX}{self.name} {base64.b64encode(self.key_id + self.blob).decode()}\n"


def split_note(note: str) -> tuple[str, list[Signature]]:
    """``(text, signatures)`` of a signed note; NoteError when it is not one."""
    if len(note.encode()) > MAX_NOTE_BYTES:
        raise NoteError(f"note is larger than {MAX_NOTE_BYTES} bytes")
    if any(ord(c) < 0x20 and c != "\n" for c in note):
        raise NoteError("note holds a control character other than newline")
    if not note.endswith("\n"):
        raise NoteError("note does not end in a newline")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise NoteError("note has no blank line before its signatures")
    text, sig_lines = note[: cut + 1], note[cut + 2 :].splitlines()
    if not sig_lines or len(sig_lines) > MAX_SIGNATURES:
        raise NoteError(f"note has {len(sig_lines)} signature lines (1 to {MAX_SIGNATURES} allowed)")
    sigs = []
    for line in sig_lines:
        if not line.startswith(SIG_PREFIX):
            raise NoteError(f"signature line {line[:40]!r} does not start with an em dash and space")
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        _check_name(name)
        blob = _b64(b64)
        if len(blob) < 5:
            raise NoteError(f"signature by {name!r} is too short")
        sigs.append(Signature(name, blob[:4], blob[4:]))
    return text, sigs


def sign_note(text: str, signers: list[Signer]) -> str:
    if not text.endswith("\n"):
        raise NoteError("note text must end in a newline")
    lines = "".join(Signature(s.name, s.verifier.key_id, s.sign(text.encode())).line() for s in signers)
    return f"{text}\n{lines}"


def cosign_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode()


def cosign(text: str, signer: Signer, timestamp: int) -> Signature:
    """A tlog-cosignature/v1 signature over checkpoint ``text`` at POSIX time ``timestamp``."""
    if not 0 <= timestamp < 2**63:
        raise NoteError(f"cosignature timestamp {timestamp} is out of range")
    sig = signer.sign(cosign_message(text, timestamp))
    return Signature(signer.name, key_id(signer.name, COSIGNATURE_V1, signer.verifier.public),
                     struct.pack(">Q", timestamp) + sig)


def check_signature(text: str, sig: Signature, verifier: Verifier) -> int | None:
    """True-ish when ``sig`` by ``verifier`` verifies over ``text``: returns 0 for a note
    signature, the timestamp for a cosignature, None when it does not verify."""
    if verifier.sig_type == COSIGNATURE_V1:
        if len(sig.blob) != COSIGNATURE_BYTES:
            return None
        (ts,) = struct.unpack(">Q", sig.blob[:8])
        return ts if verifier.check(cosign_message(text, ts), sig.blob[8:]) else None
    return 0 if verifier.check(text.encode(), sig.blob) else None


def matching(sigs: list[Signature], verifier: Verifier) -> list[Signature]:
    """The signatures that claim to be ``verifier``'s (same name and key ID); others are
    ignored, as the signed-note spec requires of unknown keys."""
    return [s for s in sigs if s.name == verifier.name and s.key_id == verifier.key_id]


def open_note(note: str, verifier: Verifier) -> str:
    """The text of ``note`` if ``verifier`` signed it; NoteError saying why not otherwise."""
    text, sigs = split_note(note)
    mine = matching(sigs, verifier)
    if not mine:
        raise NoteError(f"note is not signed by {verifier.name} (key ID {verifier.key_id.hex()})")
    if any(check_signature(text, s, verifier) is None for s in mine):
        raise NoteError(f"the signature by {verifier.name} does not verify: the note was changed "
                        "or signed by another key under that name")
    return text
