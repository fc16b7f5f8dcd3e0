"""Read trace files: OTLP JSON, NDJSON or protobuf, Jaeger JSON, Zipkin v2 JSON; plain or gzip.

``.json`` holds one ``ExportTraceServiceRequest`` object (or, as the Collector's file
exporter writes, one per line), ``.ndjson``/``.jsonl`` one object per line, ``.pb``/``.bin``
one serialized protobuf request. Any other name is sniffed: a document whose first
non-blank byte is ``{`` is JSON (``{`` can never start a valid protobuf request: it would
be field 15 with the deprecated group wire type), and so is one starting with ``[`` (a
Zipkin v2 span list), anything else is protobuf. A gzip magic number is honoured under every
name. A JSON document that is not OTLP is detected by content (``agent.otlp.foreign``): Jaeger
and Zipkin v2 exports are translated to the OTLP spans they carry; anything else is refused
naming what it is, never read as an empty batch; a text file that is neither JSON nor
protobuf (a CSV, a log) is refused as text, with the formats that are read.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from agent.batch import SpanBatch
from agent.otlp.concat import concat_batches
from agent.otlp.errors import OtlpDecodeError
from agent.otlp.foreign import to_otlp
from agent.otlp.jsonfast import decode_json_fast
from agent.otlp.jsonfmt import decode_json, decode_json_into, parse_json
from agent.otlp.rules import BatchBuilder

_JSON_SUFFIXES = {".json"}
_NDJSON_SUFFIXES = {".ndjson", ".jsonl"}
_PROTOBUF_SUFFIXES = {".pb", ".bin", ".protobuf"}


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise OtlpDecodeError(f"{path}: looks gzip-compressed but cannot be read: {exc}") from None
    return data


def _suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _decode_ndjson(data: bytes, path: Path, into: BatchBuilder | None = None) -> SpanBatch:
    """One batch per line, concatenated: the same batch as one builder fed every line."""
    batches = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            batches.append(_decode_document(line, into))
        except OtlpDecodeError as exc:
            raise OtlpDecodeError(f"{path}, line {number}: {exc}") from None
    return concat_batches(batches)


def _decode_document(data: bytes, into: BatchBuilder | None = None) -> SpanBatch:
    """One JSON document of any supported format -> its batch (``into``: the Python walk only,
    into that builder)."""
    if into is None and data.lstrip()[:1] != b"[":
        batch = decode_json_fast(data)  # the C walker, when built, for the usual OTLP file
        if batch is not None and (len(batch) or batch.rejected):
            return batch
        if batch is None and data.lstrip()[:1] != b"{":
            return decode_json(data)  # not an object: the walk's own message
    doc = parse_json(data)
    fmt, otlp = to_otlp(doc)  # raises naming the document when it is no trace format we read
    builder = BatchBuilder() if into is None else into
    where = "" if fmt == "otlp" else f"{fmt} JSON (read as the OTLP spans it carries): "
    try:
        decode_json_into(builder, otlp)
    except OtlpDecodeError as exc:
        raise OtlpDecodeError(f"{where}{exc}") from None
    return builder.build()


def _decode_json(data: bytes, path: Path, into: BatchBuilder | None = None) -> SpanBatch:
    """One document; a file of several lines that is not one document is read as NDJSON."""
    try:
        return _decode_document(data, into)
    except OtlpDecodeError as exc:
        if len(data.strip().splitlines()) > 1 and str(exc).startswith("not valid JSON"):
            return _decode_ndjson(data, path, into)
        raise OtlpDecodeError(f"{path}: {exc}") from None


def _decode_protobuf(data: bytes, path: Path, into: BatchBuilder | None = None) -> SpanBatch:
    from agent.otlp import decode_protobuf  # the fast decoder when built
    from agent.otlp.reference import decode_request, parse_request

    try:
        if into is not None:
            return decode_request(parse_request(data), into)
        return decode_protobuf(data)
    except OtlpDecodeError as exc:
        text = _as_text(data)
        if text is not None:  # a CSV, a log, a YAML file: say so, not the protobuf parser's words
            first = text.strip().splitlines()[0][:60] if text.strip() else ""
            raise OtlpDecodeError(
                f"{path}: not a trace file carbonspan reads: it is text (it begins {first!r}), "
                "neither JSON nor OTLP protobuf; give an OTLP JSON/NDJSON or protobuf export, a "
                "Jaeger JSON export (UI download or query API) or a Zipkin v2 JSON span list"
            ) from None
        raise OtlpDecodeError(f"{path}: {exc}") from None


def _as_text(data: bytes) -> str | None:
    """``data`` as text when it reads as UTF-8 with no control bytes but tab, CR and LF (a
    protobuf request is binary: its tags and lengths are mostly control bytes)."""
    try:
        text = data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return None
    return text


def read_trace_file(path: str | Path, into: BatchBuilder | None = None) -> SpanBatch:
    """Decode every span in a trace file (see the module docstring for formats).

    ``into``: decode with the Python rules into that builder (the C decoders give the same
    batch; a builder that records each span is how ``agent.explain`` sees them).
    Raises ``OtlpDecodeError`` naming the file (and line, for NDJSON) when its content
    cannot be read, and ``OSError`` when the file cannot be opened.
    """
    path = Path(path)
    data = _read(path)
    suffix = _suffix(path)
    if suffix in _NDJSON_SUFFIXES:
        return _decode_ndjson(data, path, into)
    if suffix in _JSON_SUFFIXES:
        return _decode_json(data, path, into)
    if suffix in _PROTOBUF_SUFFIXES:
        return _decode_protobuf(data, path, into)
    if data.lstrip()[:1] in (b"{", b"["):
        return _decode_json(data, path, into)
    return _decode_protobuf(data, path, into)
