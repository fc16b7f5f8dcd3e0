"""The C extensions whose sums must equal the Python reference's bit for bit are built without
floating-point contraction (a*b+c fused into one rounding, which -std=gnu11 lets GCC do) and
without -ffast-math, so no compiler choice can change a carbon figure."""

from __future__ import annotations

import ast
from pathlib import Path

SETUP = Path(__file__).resolve().parents[1] / "setup.py"
#: the extensions that add up energy and carbon (the decoders only copy numbers)
SUMMING = {"agent._score", "aggregator.fold._fold"}


def _extensions() -> dict[str, ast.Call]:
    out = {}
    for node in ast.walk(ast.parse(SETUP.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            out[node.args[0].value] = node
    return out


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_summing_extensions_forbid_contraction_and_fast_math() -> None:
    found = _extensions()
    assert SUMMING <= set(found), set(found)
    for name in SUMMING:
        args = next(k.value for k in found[name].keywords if k.arg == "extra_compile_args")
        flags = _strings(args)
        assert "-ffp-contract=off" in flags, name
        assert not {f for f in flags if "fast-math" in f or f == "-Ofast"}, name
    assert "-ffast-math" not in SETUP.read_text().replace("no -ffast-math", "")
