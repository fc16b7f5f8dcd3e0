"""The C extensions whose sums must equal the Python reference's bit for bit are built without
floating-point contraction (a*b+c fused into one rounding, which -std=gnu11 lets GCC do) and
without -ffast-math, so no compiler choice can change a carbon figure."""

from __future__ import annotations

import ast
import os
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


def test_make_venv_fails_on_a_compile_error_and_pip_install_stays_optional() -> None:
    """Every extension's ``optional`` is ``OPTIONAL``, false when CARBONSPAN_REQUIRE_C=1, which the
    Makefile's pip install sets: a compile error then fails ``make venv`` instead of leaving the
    previous .so (of the same *_VERSION, so the import check passes) in use."""
    import runpy

    exts = _extensions()
    for name, call in exts.items():
        opt = next(k.value for k in call.keywords if k.arg == "optional")
        assert isinstance(opt, ast.Name) and opt.id == "OPTIONAL", name
    import setuptools

    real = setuptools.setup
    try:
        setuptools.setup = lambda **kw: None
        for env, want in (("1", False), ("0", True), (None, True)):
            old = os.environ.pop("CARBONSPAN_REQUIRE_C", None)
            if env is not None:
                os.environ["CARBONSPAN_REQUIRE_C"] = env
            try:
                assert runpy.run_path(str(SETUP))["OPTIONAL"] is want, env
            finally:
                os.environ.pop("CARBONSPAN_REQUIRE_C", None)
                if old is not None:
                    os.environ["CARBONSPAN_REQUIRE_C"] = old
    finally:
        setuptools.setup = real
    recipe = (SETUP.parent / "Makefile").read_text()
    install = next(x for x in recipe.splitlines() if "pip install --quiet -e" in x)
    assert "CARBONSPAN_REQUIRE_C=" in install and "CARBONSPAN_ALLOW_PYTHON" in install
