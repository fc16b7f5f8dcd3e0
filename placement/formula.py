"""YAML formula policies: a placement policy written as one arithmetic expression.

    name: thrifty-green
    description: cheap first, but a dirty grid costs extra
    minimize: cost_per_hour + 0.002 * carbon_intensity

The expression may use numbers, the cluster's numeric fields (``carbon_intensity``,
``cost_per_hour``, ``capacity``, ``used``, any other numeric field the clusters carry, plus the
derived ``size`` and ``headroom``), ``+ - * / **``, unary minus and ``min``/``max``/``abs``.
Nothing else parses: no attribute access, no calls to anything but those three, so a policy
file cannot run code. The expression is compiled once into a function over numpy columns, so
the same formula scores one live placement or 100,000 evaluation rows. A cluster whose value
is undefined (a null field, a division by zero) gets no score and ranks last.
"""

from __future__ import annotations

import ast
import operator
import warnings
from collections.abc import Callable, Mapping
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from placement.identity import formula_identity
from placement.providers import ArrayProvider

Fn = Callable[[Mapping[str, np.ndarray]], np.ndarray]
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_FUNCS = {"min": np.minimum, "max": np.maximum, "abs": np.abs}


class FormulaError(ValueError):
    """A policy file or expression that cannot be used; says where and what to change."""


def _compile(node: ast.AST, where: str) -> tuple[Fn, set[str]]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        value = float(node.value)
        return (lambda f: np.float64(value)), set()
    if isinstance(node, ast.Name):
        name = node.id
        return (lambda f: f[name]), {name}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner, names = _compile(node.operand, where)
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        return (lambda f: sign * inner(f)), names
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        op = _BINOPS[type(node.op)]
        left, ln = _compile(node.left, where)
        right, rn = _compile(node.right, where)
        return (lambda f: op(left(f), right(f))), ln | rn
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and node.args
        and not node.keywords
    ):
        fn = _FUNCS[node.func.id]
        parts = [_compile(a, where) for a in node.args]
        names = set().union(*(n for _, n in parts))
        if fn is np.abs:
            if len(parts) != 1:
                raise FormulaError(f"{where}: abs() takes one argument")
            return (lambda f: np.abs(parts[0][0](f))), names
        return (lambda f: reduce(fn, [p(f) for p, _ in parts])), names
    raise FormulaError(
        f"{where}: {ast.unparse(node)!r} is not allowed; use numbers, cluster fields, "
        "+ - * / **, and min/max/abs"
    )


def compile_formula(expr: str, where: str = "formula") -> tuple[Fn, set[str]]:
    """Compile an expression into a column function and the field names it reads."""
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" etc.: we report our own
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"{where}: {expr!r} is not an expression ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise FormulaError(f"{where}: cannot parse the expression ({type(exc).__name__})") from None
    try:
        return _compile(tree.body, where)
    except RecursionError:
        raise FormulaError(f"{where}: the expression is nested too deeply") from None


class FormulaProvider(ArrayProvider):
    """A provider whose score is ``±expression`` over cluster fields."""

    def __init__(self, name: str, expr: str, maximize: bool, origin: str, description: str = ""):
        self.name = name
        self.expr = expr
        self.maximize = maximize
        self.origin = origin
        self.description = description or f"{'maximize' if maximize else 'minimize'} {expr}"
        self._fn, self.fields = compile_formula(expr, f"{origin}: {name}")

    def identity(self) -> dict[str, Any]:
        """The canonical digest of the formula's content (``placement.identity``)."""
        return formula_identity(self.name, "maximize" if self.maximize else "minimize", self.expr)

    def score_arrays(self, f: Mapping[str, np.ndarray]) -> np.ndarray:
        missing = sorted(self.fields - f.keys())
        if missing:
            raise FormulaError(
                f"policy {self.name!r} ({self.origin}) reads field(s) {missing} that the "
                f"clusters do not carry; they have {sorted(f)}"
            )
        shape = next(iter(f.values())).shape
        with np.errstate(all="ignore"):
            v = np.broadcast_to(np.asarray(self._fn(f), np.float64), shape)
        v = v if self.maximize else -v
        return np.where(np.isfinite(v), v, np.nan)


def load_policy_file(path: Path) -> FormulaProvider:
    """Read a YAML policy file; errors name the file and the key to fix."""
    try:
        doc: Any = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise FormulaError(f"cannot read policy file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise FormulaError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
        raise FormulaError(f"{path}: a policy file needs a 'name' string")
    goals = [k for k in ("minimize", "maximize") if k in doc]
    if len(goals) != 1 or not isinstance(doc[goals[0]], str | int | float):
        raise FormulaError(f"{path}: give exactly one of 'minimize' or 'maximize' (an expression)")
    return FormulaProvider(
        doc["name"], str(doc[goals[0]]), goals[0] == "maximize", str(path), str(doc.get("description", ""))
    )
