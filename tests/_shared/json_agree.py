"""The OTLP/JSON decoders compared: the C walker and ``decode_json`` against the orjson +
Python walk, for tests/otlp's property and hostile-text tests."""

from __future__ import annotations

from typing import Any

from agent.otlp.jsonfast import decode_json_fast
from agent.otlp.jsonfmt import decode_json, decode_json_python


def outcome(fn: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(data)
    except Exception as exc:  # noqa: BLE001 -- the exception itself is what is compared
        return type(exc).__name__, str(exc)


def assert_agrees(data: bytes, assert_same: Any) -> bool:
    """decode_json == decode_json_python (batch, or exception and message); True if C decoded it."""
    fast = decode_json_fast(data)
    want = outcome(decode_json_python, data)
    got = outcome(decode_json, data)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert_same(got[1], want[1])
    else:
        assert got[1] == want[1]
    if fast is not None:
        assert want[0] == "ok", f"the C walker accepted what the Python walk refuses: {want}"
        assert_same(fast, want[1])
    return fast is not None
