"""Policy identity: which policy, exactly, an evaluation measured.

Evidence belongs to the policy that was measured, not to its name. Every recorded R-ec
evaluation carries the candidate's identity under the event key ``policy_identity``, and the
gate licenses a policy only with an evaluation whose identity digest equals the policy's
identity now. A YAML formula edited under the same ``name:``, an upgraded plugin or a changed
built-in is a different policy: it has no evaluation until it is re-evaluated.

An identity is a JSON object with ``kind``, ``name``, the facts below and ``digest``, the
``sha256:`` of the canonical JSON (``schema.canonical``) of every other key:

====================  ===========================================================================
kind                  facts
====================  ===========================================================================
``formula``           ``goal`` (``minimize``/``maximize``) and ``expression``, the expression in
                      canonical form (``ast.unparse``: spacing, redundant brackets and ``0.010``
                      vs ``0.01`` do not change it; any change of meaning does). The description
                      is not part of the policy.
``plugin``            ``distribution`` and ``version`` (``importlib.metadata`` of the
                      distribution that provides the entry point) and ``entry_point``
                      (``group:name = module:object``)
``built-in``          ``code_version``: :func:`code_digest` of the code that decides the policy's
                      choices (for a provider, its class and the shared ranking helpers)
``unidentified``      a provider object handed over without an ``identity``: it never matches
====================  ===========================================================================

Public API, for anything that records evidence in the placement audit log (the scheduling
wing's time-shifting evaluations, for example):

- :func:`policy_identity` (a provider object) and ``placement.evaluation.identity_of`` (a policy
  name, resolved as placement resolves it) return the identity to store under
  ``policy_identity``;
- :func:`builtin_identity` (``name``, ``code_version``) builds one for code of your own, with
  :func:`code_digest` (functions/classes) as a ready-made ``code_version``;
- :func:`same_policy` says whether a recorded identity is the policy now, and
  :func:`describe` renders one for a reason line ("digest sha256:3f2a…").

Record with ``placement.record_evaluation(path, trace, result, identity=...)`` or, for an
event of your own, put the identity under ``policy_identity`` and append with
``placement.audit.record``.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from functools import cache
from typing import Any

from schema.canonical import canonical_json, sha256_tag

KEY = "policy_identity"
FORMULA, PLUGIN, BUILTIN, UNIDENTIFIED = "formula", "plugin", "built-in", "unidentified"


def _sealed(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "digest": sha256_tag(canonical_json(doc))}


def canonical_expression(expr: str) -> str:
    """The expression as Python's own unparser writes it (one form per meaning as parsed)."""
    return ast.unparse(ast.parse(expr.strip(), mode="eval"))


def formula_identity(name: str, goal: str, expr: str) -> dict[str, Any]:
    """A YAML formula's identity: the canonical digest of its content (name, goal, expression)."""
    return _sealed({"kind": FORMULA, "name": name, "goal": goal,
                    "expression": canonical_expression(expr)})


def plugin_identity(name: str, entry_point: Any) -> dict[str, Any]:
    """A plugin's identity: its distribution's name and version and the entry point."""
    dist = getattr(entry_point, "dist", None)
    return _sealed({
        "kind": PLUGIN,
        "name": name,
        "distribution": None if dist is None else str(dist.name),
        "version": None if dist is None else str(dist.version),
        "entry_point": f"{entry_point.group}:{entry_point.name} = {entry_point.value}",
    })


def builtin_identity(name: str, code_version: str) -> dict[str, Any]:
    """A built-in's identity: its name and the version of the code that decides it."""
    return _sealed({"kind": BUILTIN, "name": name, "code_version": str(code_version)})


@cache
def _source_digest(obj: Any) -> str:
    tree = ast.parse(inspect.getsource(obj).strip() + "\n")  # comments and layout drop out
    return ast.dump(tree)


@cache
def code_digest(*objects: Any) -> str:
    """``sha256:`` over the parsed source of functions/classes: a code version that changes
    whenever their code does (comments and formatting aside), with nothing to bump by hand."""
    return sha256_tag("\n".join(_source_digest(o) for o in objects).encode())


def policy_identity(provider: Any) -> dict[str, Any]:
    """The identity of a resolved provider (built-in, formula or plugin), or ``unidentified``."""
    ident = getattr(provider, "identity", None)
    if callable(ident):
        ident = ident()
    if isinstance(ident, Mapping) and isinstance(ident.get("digest"), str):
        return dict(ident)
    return {"kind": UNIDENTIFIED, "name": str(getattr(provider, "name", "?")), "digest": None}


def same_policy(recorded: Any, current: Mapping[str, Any]) -> bool:
    """True when ``recorded`` (an event's ``policy_identity``) is the policy ``current``."""
    return (
        isinstance(recorded, Mapping)
        and isinstance(current.get("digest"), str)
        and recorded.get("digest") == current["digest"]
    )


def describe(identity: Any) -> str:
    """A short human form for reason lines."""
    if not isinstance(identity, Mapping):
        return "no recorded identity (recorded before identities were)"
    kind = identity.get("kind")
    if kind == PLUGIN:
        return (f"distribution {identity.get('distribution')} {identity.get('version')} "
                f"(entry point {identity.get('entry_point')})")
    if kind == BUILTIN:
        return f"code version {_short(identity.get('code_version'))}"
    if kind == UNIDENTIFIED:
        return "no identity (a provider object without one)"
    return f"digest {_short(identity.get('digest'))}"


def _short(tag: Any) -> str:
    s = str(tag)
    return s[:23] + "…" if s.startswith("sha256:") and len(s) > 23 else s
