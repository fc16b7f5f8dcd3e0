"""Allocation policy specs (``prefab`` | ``filter`` | ``timeshift``) -> policy objects.

Prefab names are case-insensitive; filters are Compute, VCpu, Ram unless noted (the table is
docs/simulation.md's "Prefabs"; facts from OpenDC's ComputeSchedulers.kt).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scheduling.policy import FILTERS, WEIGHERS, FewestTasksPolicy, Filter, FilterPolicy, Weigher
from scheduling.topology import SpecError

BASE = (Filter("Compute"), Filter("VCpu"), Filter("Ram"))
GPU = (Filter("Compute"), Filter("VCpu"), Filter("VGpu"), Filter("Ram"))


def _fp(name: str, filters: tuple[Filter, ...], *weighers: Weigher, subset: int = 1) -> FilterPolicy:
    return FilterPolicy(filters, tuple(weighers), subset, name)


#: subset size meaning "every fitting host" (the Random prefab)
ALL = 1 << 30

PREFABS: dict[str, Any] = {
    "Mem": _fp("Mem", (Filter("VCpu"), Filter("Ram")), Weigher("Ram", 1.0)),
    "MemInv": _fp("MemInv", BASE, Weigher("Ram", -1.0)),
    "CoreMem": _fp("CoreMem", BASE, Weigher("CoreRam", 1.0)),
    "CoreMemInv": _fp("CoreMemInv", BASE, Weigher("CoreRam", -1.0)),
    "ActiveServers": _fp("ActiveServers", BASE, Weigher("InstanceCount", -1.0)),
    "ActiveServersInv": _fp("ActiveServersInv", BASE, Weigher("InstanceCount", 1.0)),
    "ProvisionedCores": _fp("ProvisionedCores", BASE, Weigher("VCpu", 1.0)),
    "ProvisionedCoresInv": _fp("ProvisionedCoresInv", BASE, Weigher("VCpu", -1.0)),
    "Random": _fp("Random", BASE, subset=ALL),
    "TaskNumMemorizing": FewestTasksPolicy(BASE, "TaskNumMemorizing"),
    "Timeshift": None,  # a TimeshiftSpec with its defaults (below)
    "ProvisionedCpuGpuCores": _fp("ProvisionedCpuGpuCores", GPU, Weigher("VCpu", 1.0), Weigher("VGpu", 1.0)),
    "ProvisionedCpuGpuCoresInv": _fp("ProvisionedCpuGpuCoresInv", GPU, Weigher("VCpu", -1.0),
                                     Weigher("VGpu", -1.0)),
    "GpuTaskMemorizing": FewestTasksPolicy(GPU, "GpuTaskMemorizing"),
}
_BY_LOWER = {k.lower(): k for k in PREFABS}


@dataclass(frozen=True)
class StopperSpec:
    window_size: int = 168
    forecast: bool = True
    forecast_threshold: float = 0.6
    forecast_size: int = 24


@dataclass(frozen=True)
class TimeshiftSpec:
    """Time-shifting around a placement policy (docs/simulation.md, "Time-shifting")."""

    placement: Any
    window_size: int = 168
    forecast: bool = True
    forecast_size: int = 24  # hours
    short_threshold: float = 0.2
    long_threshold: float = 0.35
    memorize: bool = True
    stopper: StopperSpec | None = None
    provider: Any = None  # forecastProvider spec; None = persistence
    deadline_margin: float = 0.1  # safety margin on the runtime
    decision_interval_min: float = 15.0
    name: str = "timeshift"
    extra: dict = field(default_factory=dict)


def _filters(where: str, specs: list[dict]) -> tuple[Filter, ...]:
    out = []
    for i, f in enumerate(specs):
        w = f"{where}.filters[{i}]"
        kind = _known(w, f, {"type", "filterName", "allocationRatio", "limit"}).get("type")
        if kind not in FILTERS:
            raise SpecError(f"{w}.type {kind!r}: use one of {', '.join(FILTERS)}")
        ratio = _number(f"{w}.allocationRatio", f.get("allocationRatio", 1.0))
        if ratio <= 0:
            raise SpecError(f"{w}.allocationRatio: must be > 0")
        if kind == "InstanceCount" and "limit" not in f:
            raise SpecError(f"{w}: InstanceCount needs a limit")
        limit = f.get("limit", 0)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise SpecError(f"{w}.limit: {limit!r} must be a whole number >= 0")
        out.append(Filter(kind, ratio, limit))
    return tuple(out)


def _weighers(where: str, specs: list[dict]) -> tuple[Weigher, ...]:
    out = []
    for i, w in enumerate(specs):
        at = f"{where}.weighers[{i}]"
        kind = _known(at, w, {"type", "multiplier", "allocationRatio"}).get("type")
        if kind not in WEIGHERS:
            raise SpecError(f"{at}.type {kind!r}: use one of {', '.join(WEIGHERS)}")
        out.append(Weigher(kind, _number(f"{at}.multiplier", w.get("multiplier", 1.0)),
                           _number(f"{at}.allocationRatio", w.get("allocationRatio", 1.0))))
    return tuple(out)


def _known(where: str, obj: Any, keys: set[str]) -> dict:
    if not isinstance(obj, dict):
        raise SpecError(f"{where}: expected an object")
    for k in obj:
        if k not in keys:
            raise SpecError(f"{where}: unknown key {k!r} (known: {', '.join(sorted(keys))})")
    return obj


TIMESHIFT_KEYS = {"type", "filters", "weighers", "windowSize", "subsetSize", "forecast",
                  "shortForecastThreshold", "longForecastThreshold", "forecastSize", "taskStopper",
                  "memorize", "forecastProvider", "deadlineMargin", "decisionIntervalMinutes", "name"}


def _number(where: str, v: Any) -> float:
    """A finite JSON number (not a string, not true/false)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecError(f"{where}: {v!r} must be a number")
    return float(v)


def _fraction(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
        raise SpecError(f"{where}: {v!r} must be a number in [0, 1]")
    return float(v)


def _flag(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise SpecError(f"{where}: {v!r} must be true or false")
    return v


def _size(where: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(f"{where}: {v!r} must be a whole number >= 1")
    return v


def label_only_prefab(spec: Any) -> str | None:
    """The prefab name a ``{"type": "prefab", "name": X}`` spec without ``policyName`` gives
    as its label (OpenDC then runs Mem: AllocationPolicySpec.kt), or None."""
    if (isinstance(spec, dict) and spec.get("type") == "prefab" and "policyName" not in spec
            and str(spec.get("name", "")).lower() in _BY_LOWER):
        return str(spec["name"])
    return None


def make_policy(spec: dict | None, where: str = "allocationPolicies[0]", compat: bool = False) -> Any:
    """A FilterPolicy, FewestTasksPolicy or TimeshiftSpec. With ``compat`` a prefab spec whose
    ``name`` is a prefab name but has no ``policyName`` runs Mem, as in OpenDC (the caller
    notes it); without, it is refused."""
    if spec is None:
        return PREFABS["Mem"]
    kind = _known(where, spec, {"type", "policyName", "name", "filters", "weighers", "subsetSize",
                                *TIMESHIFT_KEYS}).get("type")
    if kind == "prefab":
        _known(where, spec, {"type", "policyName", "name"})
        if label_only_prefab(spec) is not None and not compat:
            raise SpecError(f"{where}: 'name' is only a label and policyName defaults to Mem (OpenDC "
                            f"would run Mem); write \"policyName\": \"{spec['name']}\" to use that "
                            "prefab, or run with --compat opendc to reproduce OpenDC")
        raw = str(spec.get("policyName", "Mem")).strip()
        if raw.lower() not in _BY_LOWER:
            raise SpecError(f"{where}.policyName {raw!r}: use one of {', '.join(PREFABS)} (any case)")
        name = _BY_LOWER[raw.lower()]
        if name == "Timeshift":
            return timeshift({"type": "timeshift", "filters": [{"type": t.kind} for t in BASE],
                              "weighers": [{"type": "Ram", "multiplier": 1.0}], "memorize": False},
                             where, "Timeshift")
        return PREFABS[name]
    if kind == "filter":
        _known(where, spec, {"type", "filters", "weighers", "subsetSize", "name"})
        return FilterPolicy(_filters(where, spec.get("filters", [{"type": "Compute"}])),
                            _weighers(where, spec.get("weighers", [])),
                            _size(f"{where}.subsetSize", spec.get("subsetSize", 1)),
                            str(spec.get("name", "filter")))
    if kind == "timeshift":
        return timeshift(spec, where, str(spec.get("name", "timeshift")))
    raise SpecError(f"{where}.type {kind!r}: use prefab, filter or timeshift")


def timeshift(spec: dict, where: str, name: str) -> TimeshiftSpec:
    _known(where, spec, TIMESHIFT_KEYS)
    filters = _filters(where, spec.get("filters", [{"type": "Compute"}]))
    memorize = _flag(f"{where}.memorize", spec.get("memorize", True))
    placement = FewestTasksPolicy(filters, f"{name}/fewest-tasks") if memorize else FilterPolicy(
        filters, _weighers(where, spec.get("weighers", [])),
        _size(f"{where}.subsetSize", spec.get("subsetSize", 1)), f"{name}/filter")
    stopper = None
    if spec.get("taskStopper") is not None:
        st = _known(f"{where}.taskStopper", spec["taskStopper"],
                    {"type", "windowSize", "forecast", "forecastThreshold", "forecastSize"})
        stopper = StopperSpec(_size(f"{where}.taskStopper.windowSize", st.get("windowSize", 168)),
                              _flag(f"{where}.taskStopper.forecast", st.get("forecast", True)),
                              _fraction(f"{where}.taskStopper.forecastThreshold", st.get("forecastThreshold", 0.6)),
                              _size(f"{where}.taskStopper.forecastSize", st.get("forecastSize", 24)))
    margin = spec.get("deadlineMargin", 0.1)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or margin < 0:
        raise SpecError(f"{where}.deadlineMargin: {margin!r} must be a number >= 0")
    interval = spec.get("decisionIntervalMinutes", 15.0)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        raise SpecError(f"{where}.decisionIntervalMinutes: {interval!r} must be a number > 0")
    return TimeshiftSpec(
        placement=placement,
        window_size=_size(f"{where}.windowSize", spec.get("windowSize", 168)),
        forecast=_flag(f"{where}.forecast", spec.get("forecast", True)),
        forecast_size=_size(f"{where}.forecastSize", spec.get("forecastSize", 24)),
        short_threshold=_fraction(f"{where}.shortForecastThreshold", spec.get("shortForecastThreshold", 0.2)),
        long_threshold=_fraction(f"{where}.longForecastThreshold", spec.get("longForecastThreshold", 0.35)),
        memorize=memorize, stopper=stopper, provider=spec.get("forecastProvider"),
        deadline_margin=float(margin), decision_interval_min=float(interval), name=name,
    )


def round_half_up(x: float) -> int:
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def check_compat_quantiles(ts: TimeshiftSpec, where: str) -> None:
    """In OpenDC's row-indexed quantile, index round(n x t) must stay below n = forecastSize - 1."""
    checks = [("forecastSize", ts.forecast_size, "shortForecastThreshold", ts.short_threshold),
              ("forecastSize", ts.forecast_size, "longForecastThreshold", ts.long_threshold)]
    if ts.stopper:
        checks.append(("taskStopper.forecastSize", ts.stopper.forecast_size,
                       "taskStopper.forecastThreshold", ts.stopper.forecast_threshold))
    for size_key, size, key, t in checks:
        n = size - 1
        if (ts.forecast if "taskStopper" not in key else ts.stopper.forecast) and (
                n < 1 or round_half_up(n * t) >= n):
            raise SpecError(f"{where}.{key}: with {size_key} {size} OpenDC's quantile index "
                            f"round({n} x {t:g}) is past its {n}-value forecast; lower it or raise {size_key}")
