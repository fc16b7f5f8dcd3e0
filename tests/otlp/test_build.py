"""The fast decoder is built and in use (kept apart so that it reports even when it is not)."""

from __future__ import annotations

import importlib

import agent.otlp


def test_the_c_extension_is_built_and_used():
    """A broken build must fail here rather than silently fall back to the slow decoder."""
    try:
        importlib.import_module("agent.otlp.fast")
    except ImportError as exc:
        raise AssertionError(
            f"the fast OTLP decoder is not available ({exc}); build it with "
            "`.venv/bin/pip install -e '.[test]'` (needs gcc and the Python headers)"
        ) from None
    assert agent.otlp.FAST_DECODER
    assert agent.otlp.decode_protobuf.__module__ == "agent.otlp.fast"
