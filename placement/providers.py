"""Placement providers: score candidate clusters for a job; higher scores win.

A provider is any object with ``name`` and ``score(clusters, job) -> [float | None, ...]``,
one score per cluster, higher is better, ``None`` ranks last (unknown is never a winner by
default). The framework decides which clusters *fit* (``capacity - used >= size``) and picks
the best fitting one; ties go to the earlier cluster.

Built-ins are written once, over arrays: ``score_arrays`` takes field columns shaped
(rows, clusters) with NaN for a missing value and scores every row at once. ``score`` is that
same code on a single row, so the live path and the evaluator (which scores 100,000 jobs ×
regions in one call) cannot drift apart. Lexicographic orders ("lowest intensity, then most
headroom") are exact: each key becomes a dense rank and the ranks are combined in base
``clusters + 1``, so no weight can let a later key outvote an earlier one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from placement.identity import builtin_identity, code_digest

#: cluster fields every provider can rely on (numbers; carbon_intensity may be null)
NUMERIC_FIELDS = ("carbon_intensity", "cost_per_hour", "capacity", "used")


@runtime_checkable
class PlacementProvider(Protocol):
    """What a third-party provider implements (entry point group
    ``carbonspan.placement_policies``)."""

    name: str

    def score(
        self, clusters: Sequence[Mapping[str, Any]], job: Mapping[str, Any]
    ) -> Sequence[float | None]: ...


def cluster_arrays(
    clusters: Sequence[Mapping[str, Any]], job: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Every numeric cluster field as a (1, clusters) float column; missing/null -> NaN.

    Adds ``size`` (the job's demand, default 1) and ``headroom`` (capacity left after
    placing the job), the derived fields formulas and tie-breaks use.
    """
    keys: dict[str, None] = dict.fromkeys(NUMERIC_FIELDS)
    for c in clusters:
        for k, v in c.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                keys.setdefault(k, None)
    out: dict[str, np.ndarray] = {}
    for k in keys:
        vals = [c.get(k) for c in clusters]
        out[k] = np.array(
            [[float(v) if isinstance(v, int | float) and not isinstance(v, bool) else np.nan for v in vals]]
        )
    size = float(job.get("size", 1) or 0)
    out["size"] = np.full_like(out["capacity"], size)
    out["headroom"] = out["capacity"] - out["used"] - size
    return out


def dense_rank(x: np.ndarray) -> np.ndarray:
    """Ascending dense rank along axis 1 (equal values share a rank); NaN ranks after all."""
    key = np.where(np.isnan(x), np.inf, x)
    order = np.argsort(key, axis=1, kind="stable")
    s = np.take_along_axis(key, order, axis=1)
    step = np.zeros(s.shape, np.int64)
    step[:, 1:] = s[:, 1:] != s[:, :-1]
    ranks = np.empty_like(step)
    np.put_along_axis(ranks, order, np.cumsum(step, axis=1), axis=1)
    return ranks


def lexicographic(*keys: np.ndarray) -> np.ndarray:
    """Scores ordering rows by ``keys`` (each minimised, first key most significant)."""
    base = keys[0].shape[1] + 1
    total = np.zeros(keys[0].shape, np.float64)
    for k in keys:
        total = total * base + dense_rank(k)
    return -total


class ArrayProvider:
    """Base for providers written over field columns; ``score`` is one row of it."""

    name = "array"
    description = ""

    def score_arrays(self, f: Mapping[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def score(
        self, clusters: Sequence[Mapping[str, Any]], job: Mapping[str, Any]
    ) -> list[float | None]:
        s = self.score_arrays(cluster_arrays(clusters, job))[0]
        return [None if not np.isfinite(v) else float(v) for v in s]

    def identity(self) -> dict[str, Any]:
        """A built-in's identity: its code version is the digest of its class and the ranking
        helpers it scores with (``placement.identity``)."""
        return builtin_identity(
            self.name, code_digest(type(self), ArrayProvider, cluster_arrays, dense_rank, lexicographic)
        )


class CarbonAware(ArrayProvider):
    """Carbon-first: lowest declared intensity, then lowest cost, then most headroom."""

    name = "carbon-aware"
    description = "carbon-first: lowest intensity, then cost, then headroom"

    def score_arrays(self, f):
        return lexicographic(f["carbon_intensity"], f["cost_per_hour"], -f["headroom"])


class CarbonSimple(ArrayProvider):
    """The simple carbon policy: lowest declared intensity outright, headroom breaks ties.

    A cluster with no intensity ranks last (unknown is not green).
    """

    name = "carbon-simple"
    description = "lowest declared intensity outright; headroom breaks ties; unknown last"

    def score_arrays(self, f):
        return lexicographic(f["carbon_intensity"], -f["headroom"])


class CostAware(ArrayProvider):
    """Cheapest per hour; among equal prices the cleaner cluster, then more headroom."""

    name = "cost-aware"
    description = "lowest cost per hour, then lowest intensity, then headroom"

    def score_arrays(self, f):
        return lexicographic(f["cost_per_hour"], f["carbon_intensity"], -f["headroom"])


class Headroom(ArrayProvider):
    """Most capacity left after placing the job (spreads load; ignores carbon)."""

    name = "headroom"
    description = "most capacity left after placing the job"

    def score_arrays(self, f):
        return lexicographic(-f["headroom"])


BUILTINS: dict[str, type[ArrayProvider]] = {
    p.name: p for p in (CarbonAware, CarbonSimple, CostAware, Headroom)
}
#: carbon-first built-ins: unmeasured, these are replaced by ``carbon-simple``, not withheld
CARBON_FIRST = frozenset({"carbon-aware"})


class ExternalProvider:
    """Wraps a third-party provider so a wrong answer is an error naming the plugin."""

    def __init__(self, name: str, inner: Any, origin: str, identity: dict[str, Any] | None = None) -> None:
        self.name = name
        self.inner = inner
        self.origin = origin
        self.identity = identity  # distribution, version and entry point (``placement.identity``)
        self.description = getattr(inner, "description", f"third-party provider from {origin}")

    def score(self, clusters, job) -> list[float | None]:
        try:
            raw = list(self.inner.score(clusters, job))
        except Exception as exc:  # a plugin's bug must read as the plugin's, not a crash of ours
            raise ValueError(
                f"placement provider {self.name!r} ({self.origin}) failed while scoring "
                f"{len(clusters)} clusters: {type(exc).__name__}: {exc}"
            ) from exc
        if len(raw) != len(clusters):
            raise ValueError(
                f"placement provider {self.name!r} ({self.origin}) returned {len(raw)} scores "
                f"for {len(clusters)} clusters; it must return one per cluster"
            )
        out: list[float | None] = []
        for v in raw:
            if v is None:
                out.append(None)
            elif isinstance(v, int | float) and not isinstance(v, bool):
                out.append(float(v) if np.isfinite(v) else None)
            else:
                raise ValueError(
                    f"placement provider {self.name!r} ({self.origin}) returned {v!r}; "
                    "scores must be numbers or None"
                )
        return out


def fits(clusters: Sequence[Mapping[str, Any]], job: Mapping[str, Any]) -> list[bool]:
    """Which clusters have room for the job (``capacity - used >= size``)."""
    size = float(job.get("size", 1) or 0)
    return [float(c["capacity"]) - float(c["used"]) >= size for c in clusters]


def choose(scores: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Per row, the index of the best eligible score; ties go to the first.

    A non-finite or NaN score (``None``) ranks below every scored cluster but above the
    ineligible ones. Every row must have at least one eligible column.
    """
    s = np.asarray(scores, np.float64)
    key = np.where(eligible & np.isfinite(s), s, -np.inf)
    scored = np.isfinite(key).any(axis=1)
    return np.where(scored, np.argmax(key, axis=1), np.argmax(eligible, axis=1))
