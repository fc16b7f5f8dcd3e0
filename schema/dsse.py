"""DSSE envelopes (github.com/secure-systems-lab/dsse) holding in-toto Statements (v1).

A signature covers the pre-authentication encoding of the payload, never the envelope::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with ``LEN`` the byte length in ASCII decimal. The envelope is
``{"payloadType", "payload": base64(body), "signatures": [{"keyid", "sig": base64}]}``;
carbonspan's ``keyid`` is the signer's verifier key text (``schema.note.Verifier.encode``),
so a reader sees who claims to have signed, and the pinned key decides whether it is true.

A disclosure report's attestation is an in-toto Statement v1
(``_type`` ``https://in-toto.io/Statement/v1``) whose subject is the report file's SHA-256
and whose predicate (``PREDICATE_TYPE``) names the period, organisation, the signed archive
checkpoints the figures were folded from, and the carbonspan version (docs/report-format.md).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from schema.note import NoteError, Signer, Verifier

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://carbonspan.dev/attestation/disclosure-report/v1"


def pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def sign_envelope(body: bytes, signer: Signer, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    sig = signer.sign(pae(payload_type, body))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(body).decode(),
        "signatures": [{"keyid": signer.verifier.encode(), "sig": base64.b64encode(sig).decode()}],
    }


def open_envelope(envelope: Any, verifiers: list[Verifier]) -> tuple[bytes, Verifier]:
    """``(payload, the verifier that signed it)``; NoteError when no pinned key signed it."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signatures"), list):
        raise NoteError("not a DSSE envelope (no signatures list)")
    ptype, payload = envelope.get("payloadType"), envelope.get("payload")
    if ptype != PAYLOAD_TYPE or not isinstance(payload, str):
        raise NoteError(f"payloadType is {ptype!r}, not {PAYLOAD_TYPE!r}")
    try:
        body = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("the envelope's payload is not base64") from None
    message = pae(ptype, body)
    for sig in envelope["signatures"]:
        try:
            raw = base64.b64decode(sig.get("sig", ""), validate=True)
        except (binascii.Error, ValueError, AttributeError):
            continue
        for v in verifiers:
            if v.check(message, raw):
                return body, v
    names = ", ".join(v.name for v in verifiers) or "(none pinned)"
    raise NoteError(f"no signature on the attestation verifies with a pinned key ({names})")


def statement(subject_name: str, sha256_hex: str, predicate: dict[str, Any]) -> bytes:
    """The canonical (sorted-key) JSON bytes of an in-toto Statement v1."""
    return orjson.dumps({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {"sha256": sha256_hex}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }, option=orjson.OPT_SORT_KEYS)
