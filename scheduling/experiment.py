"""OpenDC2 ("legacy") experiment JSON -> scenarios (the Cartesian product of its axes).

Keys: ``name``, ``outputFolder``, ``initialSeed``, ``runs``, ``topologies``, ``workloads``,
``allocationPolicies``, ``exportModels``. Every list is an axis; each scenario runs ``runs``
times with seeds ``initialSeed + r``. Unknown keys are an error naming the key (OpenDC ignores
typos); recognised but unsupported features (failures, checkpoints, batteries) are an error
saying so. Paths are resolved against the experiment file's folder, then the working folder.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scheduling.carbon import parse_instant
from scheduling.forecast import make_provider
from scheduling.prefabs import TimeshiftSpec, check_compat_quantiles, label_only_prefab, make_policy
from scheduling.topology import SpecError, _check_keys, read_spec, resolve

EXPERIMENT_KEYS = {"name", "outputFolder", "initialSeed", "runs", "topologies", "workloads",
                   "allocationPolicies", "exportModels"}
UNSUPPORTED = {
    "failureModels": "failure models are not simulated yet",
    "maxNumFailures": "failure models are not simulated yet",
    "checkpointModels": "checkpoint models are not simulated yet",
}
WORKLOAD_KEYS = {"pathToFile", "type", "sampleFraction", "submissionTime", "deferAll", "scalingPolicy"}
EXPORT_KEYS = {"exportInterval", "printFrequency", "filesToExport"}
FILES = ("host", "task", "powerSource", "service")


@dataclass(frozen=True)
class WorkloadSpec:
    path: Path
    sample_fraction: float = 1.0
    submission_time_ms: int | None = None
    defer_all: bool = False

    @property
    def label(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Scenario:
    index: int
    topology: Path
    workload: WorkloadSpec
    policy: Any
    policy_spec: dict
    export_interval_s: int
    files: tuple[str, ...]
    seed: int
    run: int
    notes: tuple[str, ...] = ()  # said in the summary ("notes") and by the command

    @property
    def policy_name(self) -> str:
        return getattr(self.policy, "name", "policy")

    @property
    def label(self) -> str:
        return f"{self.index}-{self.topology.stem}-{self.workload.label}-{self.policy_name}-run{self.run}"


@dataclass(frozen=True)
class Experiment:
    name: str
    output_folder: Path
    scenarios: list[Scenario]
    source: dict


def _list(where: str, value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: expected a non-empty list")
    return value


def _workload(where: str, spec: Any, here: Path) -> WorkloadSpec:
    _check_keys(where, spec, WORKLOAD_KEYS, {"pathToFile"})
    if spec.get("type", "ComputeWorkload") != "ComputeWorkload":
        raise SpecError(f"{where}.type {spec['type']!r}: only ComputeWorkload is supported")
    scaling = spec.get("scalingPolicy", "NoDelay")
    if scaling != "NoDelay":
        raise SpecError(f"{where}.scalingPolicy {scaling!r}: recognised but not supported yet "
                        "(fragments run for their own duration: use NoDelay or leave it out)")
    frac = spec.get("sampleFraction", 1.0)
    if isinstance(frac, bool) or not isinstance(frac, int | float) or not 0 < frac <= 1:
        raise SpecError(f"{where}.sampleFraction: {frac!r} must be in (0, 1]")
    sub = spec.get("submissionTime")
    try:
        sub_ms = parse_instant(sub) if sub is not None else None
    except ValueError:
        raise SpecError(f"{where}.submissionTime {sub!r}: expected ISO 8601 like 2024-03-01T00:00:00") from None
    return WorkloadSpec(resolve(str(spec["pathToFile"]), here, Path.cwd()), float(frac), sub_ms,
                        bool(spec.get("deferAll", False)))


def _export(where: str, spec: Any) -> tuple[int, tuple[str, ...]]:
    if "computeExportConfig" in spec:
        raise SpecError(f"{where}.computeExportConfig: recognised but not supported (every column is written)")
    _check_keys(where, spec, EXPORT_KEYS)
    interval = spec.get("exportInterval", 300)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise SpecError(f"{where}.exportInterval: {interval!r} must be whole seconds >= 1")
    files = spec.get("filesToExport", list(FILES))
    for f in files:
        if f == "battery":
            raise SpecError(f"{where}.filesToExport: battery is recognised but not supported (no batteries)")
        if f not in FILES:
            raise SpecError(f"{where}.filesToExport: unknown file {f!r} (use {', '.join(FILES)})")
    return interval, tuple(files)


def _provider(ts: TimeshiftSpec, where: str, here: Path) -> TimeshiftSpec:
    """A forecastProvider checked at load, its recorded file resolved like every other path."""
    spec = ts.provider
    if spec is not None and not isinstance(spec, str | dict):
        raise SpecError(f"{where}.forecastProvider: {spec!r}: give a name or an object with a type")
    if isinstance(spec, dict) and spec.get("type") == "recorded" and "pathToFile" in spec:
        try:
            path = resolve(str(spec["pathToFile"]), here, Path.cwd())
        except SpecError as exc:
            raise SpecError(f"{where}.forecastProvider: {exc}") from None
        spec = {**spec, "pathToFile": str(path)}
    try:
        make_provider(spec, 0, here)
    except (ValueError, OSError) as exc:
        raise SpecError(f"{where}.forecastProvider: {exc}") from None
    return replace(ts, provider=spec)


def load_experiment(source: str | Path | dict, base: Path | None = None, compat: bool = False) -> Experiment:
    spec, here = read_spec(source, base, "experiment")
    if not isinstance(spec, dict):
        raise SpecError("experiment: expected a JSON object")
    for key in spec:
        if key in UNSUPPORTED:
            value = spec[key]
            if key != "maxNumFailures" and isinstance(value, list) and all(v is None for v in value):
                continue  # [null]: the feature is off
            raise SpecError(f"experiment.{key}: recognised but not supported: {UNSUPPORTED[key]}; remove it")
        if key not in EXPERIMENT_KEYS:
            raise SpecError(f"experiment: unknown key {key!r} (known: {', '.join(sorted(EXPERIMENT_KEYS))})")
    pol_specs = spec.get("allocationPolicies", [{"type": "prefab", "policyName": "Mem"}])
    policies = [make_policy(p, f"allocationPolicies[{i}]", compat)
                for i, p in enumerate(_list("allocationPolicies", pol_specs))]
    notes = [(f"allocationPolicies[{i}]: 'name' {label_only_prefab(p)!r} is only a label and policyName "
              "defaults to Mem, so this runs Mem, as OpenDC does (--compat opendc)",)
             if label_only_prefab(p) is not None else () for i, p in enumerate(pol_specs)]
    topologies = [resolve(str(_check_keys(f"topologies[{i}]", t, {"pathToFile"}, {"pathToFile"})["pathToFile"]),
                          here, Path.cwd()) for i, t in enumerate(_list("topologies", spec.get("topologies")))]
    workloads = [_workload(f"workloads[{i}]", w, here) for i, w in enumerate(_list("workloads", spec.get("workloads")))]
    for i, p in enumerate(policies):
        if isinstance(p, TimeshiftSpec):
            policies[i] = _provider(p, f"allocationPolicies[{i}]", here)
            if compat:
                check_compat_quantiles(p, f"allocationPolicies[{i}]")
    exports = [_export(f"exportModels[{i}]", e) for i, e in enumerate(spec.get("exportModels", [{}]) or [{}])]
    runs, seed0 = spec.get("runs", 1), spec.get("initialSeed", 0)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise SpecError(f"experiment.runs: {runs!r} must be a whole number >= 1")
    if isinstance(seed0, bool) or not isinstance(seed0, int):
        raise SpecError(f"experiment.initialSeed: {seed0!r} must be a whole number")
    scenarios = []
    for idx, (t, w, (p, ps, note), (iv, files)) in enumerate(
            itertools.product(topologies, workloads, zip(policies, pol_specs, notes, strict=True), exports)):
        for r in range(runs):
            scenarios.append(Scenario(idx, t, w, p, ps, iv, files, seed0 + r, r, note))
    return Experiment(str(spec.get("name", "experiment")), Path(spec.get("outputFolder", "output")),
                      scenarios, spec)
