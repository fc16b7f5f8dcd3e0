"""Estimates and grades from carbonspan's own archives (untrusted input).

A claim that names a service instead of an estimate takes both from the service's recent
window lines: ``archives/<agent-id>/windows-*.jsonl[.gz]`` (the layout and reading rules of
``schema.archive``), each line
``{"ts", "seq", "prev", "hash", "report"}`` with ``report.green_summary.per_service_energy_kwh``
and ``per_service_energy_model`` (and ``per_service_measured_ratio``) maps keyed by service.

- estimate: the mean of the service's energy over its most recent ``windows`` window lines,
  converted to µJ (1 kWh = 3.6e12 µJ) and rounded *up* (exact decimal arithmetic), so a claim never under-reserves by
  rounding;
- grade: the weakest grade among those windows, because one modelled window makes the figure
  partly modelled. A window is graded from its *energy* evidence only, never from where its
  intensity came from (:func:`grade_of_window`): the energy part of
  ``per_service_energy_model`` and ``per_service_measured_ratio`` (the share of the service's
  I/O spans whose energy a meter measured). ``schema.tags.MODELLED_TAGS`` (the I/O proxy with or
  without ``+cal``, and cloud SPECpower, a model) -> ``modelled``; a metered tag
  (``schema.tags.is_measured``) -> ``measured`` when the ratio is 1 (or absent, as on lines
  that predate it), else ``modelled``; a live-intensity tag (``electricity_maps_api``,
  ``grid_operator_api``) hides the energy part, so the ratio decides: 1 -> ``measured``,
  anything else -> ``modelled`` (the energy under it is the proxy at worst); an unknown or
  empty tag, or no usable window at all -> ``estimator``.

Archive lines are read with orjson directly (this module imports neither ``agent`` nor
``aggregator``) and treated as untrusted: a line that is not JSON, a value that is not a finite
non-negative number, a measured ratio that is not a number in [0, 1], or a map that is not a map
is skipped and counted in ``ignored``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext
from pathlib import Path
from typing import Any

import orjson

from schema.archive import BODY_KEY, ArchiveReadError, numbered_lines, window_files
from schema.tags import LIVE_INTENSITY_TAGS, MODELLED_TAGS, base_tag, is_measured

UJ_PER_KWH = 3_600_000_000_000  # 1 kWh = 3.6e6 J = 3.6e12 µJ
DEFAULT_WINDOWS = 12
_GRADE_RANK = {"estimator": 0, "modelled": 1, "measured": 2}


def grade_of_window(tag: Any, measured_ratio: float | None) -> str:
    """The grade one window's energy evidence earns for a service: the energy part of its
    model tag and the share of its I/O spans a meter measured (None: the line has none)."""
    if not isinstance(tag, str) or not tag:
        return "estimator"
    base = base_tag(tag)
    if base in LIVE_INTENSITY_TAGS:  # names the intensity source: the energy is in the ratio
        return "measured" if measured_ratio == 1.0 else "modelled"
    if is_measured(base):
        return "measured" if measured_ratio is None or measured_ratio >= 1.0 else "modelled"
    if base in MODELLED_TAGS:
        return "modelled"
    return "estimator"


def grade_of_tag(tag: Any) -> str:
    """The grade a single energy-model tag earns on a line with no measured ratio."""
    return grade_of_window(tag, None)


@dataclass(frozen=True, slots=True)
class ServiceEstimate:
    """What the archives say about one service: µJ per window, grade, and the evidence."""

    service: str
    estimate_uj: int
    grade: str
    windows: int  # window lines the estimate is the mean of (0: no data)
    tags: tuple[str, ...]
    ignored: int  # lines or values skipped as unreadable or not finite non-negative numbers
    measured_ratios: tuple[float | None, ...] = ()  # per window, aligned with tags


def _lines(path: Path) -> Iterator[bytes]:
    """The lines of a window file by the archive's rules (``schema.archive``); a truncated gzip
    or unreadable file: what was read stands."""
    try:
        for _, line in numbered_lines(path):
            yield line
    except (OSError, ArchiveReadError):
        return


def archive_files(archives: Path, agent_id: str | None = None) -> list[Path]:
    """Window files (``schema.archive.window_files``) under ``archives/<agent-id>/`` (all
    agents when ``agent_id`` is None)."""
    dirs = [archives / agent_id] if agent_id else sorted(p for p in archives.iterdir() if p.is_dir())
    return [f for d in dirs for f in window_files(d)]


def _ratio(summary: dict[str, Any], service: str) -> float | None | bool:
    """The service's measured ratio; None when the line has none for it (older lines); False
    when it is not a number in [0, 1] (the line is then skipped and counted in ``ignored``)."""
    ratios = summary.get("per_service_measured_ratio")
    if ratios is None or (isinstance(ratios, dict) and service not in ratios):
        return None
    v = ratios.get(service) if isinstance(ratios, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float) or not (0.0 <= v <= 1.0):
        return False
    return float(v)


def _observation(raw: bytes, service: str) -> tuple[str, float, Any, float | None] | None | bool:
    """``(ts, kwh, tag, ratio)`` for ``service`` in one line, ``None`` if absent, False if
    unusable."""
    try:
        line = orjson.loads(raw)
        summary = line[BODY_KEY]["green_summary"]
        energy = summary.get("per_service_energy_kwh", {})
        models = summary.get("per_service_energy_model", {})
        ts = line["ts"]
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return False
    if not isinstance(energy, dict) or not isinstance(models, dict) or not isinstance(ts, str):
        return False
    if service not in energy:
        return None
    kwh = energy[service]
    if isinstance(kwh, bool) or not isinstance(kwh, int | float) or not math.isfinite(kwh) or kwh < 0:
        return False
    ratio = _ratio(summary, service)
    if ratio is False:  # a ratio that is not a share: the line cannot be graded, skip it
        return False
    return ts, float(kwh), models.get(service), ratio


def estimate_service(
    archives: str | Path, service: str, *, agent_id: str | None = None, windows: int = DEFAULT_WINDOWS
) -> ServiceEstimate:
    """Estimate and grade ``service`` from its ``windows`` most recent archive window lines."""
    root = Path(archives)
    seen: list[tuple[str, float, Any, float | None]] = []
    ignored = 0
    if root.is_dir():
        for path in archive_files(root, agent_id):
            for raw in _lines(path):
                obs = _observation(raw, service)
                if obs is False:
                    ignored += 1
                elif obs is not None:
                    seen.append(obs)  # type: ignore[arg-type]
    seen.sort(key=lambda o: o[0])
    recent = seen[-windows:] if windows > 0 else []
    if not recent:
        return ServiceEstimate(service, 0, "estimator", 0, (), ignored)
    tags = tuple(str(t) if isinstance(t, str) else "" for _, _, t, _ in recent)
    ratios = tuple(r for _, _, _, r in recent)
    grade = min((grade_of_window(t, r) for t, r in zip(tags, ratios, strict=True)),
                key=_GRADE_RANK.__getitem__)
    return ServiceEstimate(service, _mean_uj([k for _, k, _, _ in recent]), grade, len(recent), tags,
                           ignored, ratios)


def _mean_uj(kwh: list[float]) -> int:
    """Mean of ``kwh`` in µJ, rounded up, computed on the decimals as written in the archive.

    ``Decimal(repr(x))`` is the shortest decimal that round-trips to ``x`` (what orjson wrote),
    so 0.001 kWh is exactly 3_600_000_000 µJ rather than one more from binary float noise.
    """
    total = sum((Decimal(repr(k)) for k in kwh), Decimal(0))
    with localcontext() as ctx:
        ctx.prec = 60
        uj = total * UJ_PER_KWH / len(kwh)
        return int(uj.to_integral_value(rounding=ROUND_CEILING))
