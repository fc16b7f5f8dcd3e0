"""``carbonspan simulate evaluate``: docs/placement.md's R-ec evaluation for a timeshift policy,
with capacity limits (the simulation), on an experiment's real inputs.

For every scenario of the named policy, on the same hosts, workload and seed:

| name | what runs |
|---|---|
| ``carbon-agnostic`` | the policy's placement without shifting (the reference) |
| the candidate | the timeshift policy as written |
| ``threshold-shift`` | the same placement, holding deferrable tasks while the intensity is not below the 30th percentile of its trace over the experiment's window (a whole-window statistic: baseline foresight, as in placement) |
| ``lowest-average-region`` | the placement, preferring hosts of the power source with the lowest mean intensity over the window, at submission (no shifting) |
| ``oracle`` | the candidate with the ``perfect`` forecast: not achievable, and not a bound |

All five are integrated over the same window. The oracle is the candidate's greedy rule given the
real future, not an optimiser: it holds a task while the intensity is not below a quantile of the
next ``forecastSize`` hours, a trough that may lie past the task's deadline guard, which then
releases it at whatever the intensity is. So it can emit more than the others (the quickstart
does); when it does, ``oracle_note`` and the table say so, and nothing calls it headroom. Reductions are against ``carbon-agnostic``, summed
over the scenarios. The verdict (margin, retirement) and the audit-log event are the placement
gate's own (``placement.decision``, ``placement.audit``, ``placement.identity``): this module is
the one place in scheduling/ that reaches into placement, through its public evidence API.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from scheduling.experiment import load_experiment
from scheduling.forecast import make_provider
from scheduling.policy import HostState, Request
from scheduling.prefabs import TimeshiftSpec
from scheduling.run import build, load_inputs
from scheduling.topology import Hosts, SpecError
from scheduling.workload import Workload

METHOD = "carbonspan-simulate"
THRESHOLD_Q = 0.3
ORACLE_LABEL = ("the candidate's rule with perfect foresight: not achievable, and not a bound "
                "(the rule is greedy, not an optimiser)")


@dataclass
class WindowStatistic:
    """Every trace row in [lo, hi): threshold-shift's whole-window percentile."""

    lo: int
    hi: int
    name: str = "window-statistic"
    label: str = "whole-window statistic (baseline foresight)"
    reads_future: bool = True

    def forecast(self, trace, issued_ms: int, horizon_ms: int) -> np.ndarray:
        rows = (trace.t_ms >= self.lo) & (trace.t_ms < self.hi)
        return trace.values[rows] if rows.any() else trace.values


@dataclass(frozen=True)
class CleanestFirst:
    """The placement restricted to the cleanest power source while it fits, else any host."""

    placement: Any
    order: tuple[int, ...]  # power sources by mean intensity, cleanest first
    name: str = "lowest-average-region"

    def fits(self, s: HostState, r: Request, allowed: np.ndarray | None = None) -> np.ndarray:
        return self.placement.fits(s, r, allowed)

    def select(self, s: HostState, r: Request, seed: int = 0, allowed: np.ndarray | None = None) -> int:
        for c in self.order:
            h = self.placement.select(s, r, seed, s.hosts.cluster == c)
            if h >= 0:
                return h
        return -1


def _window(wl: Workload) -> tuple[int, int]:
    return int(wl.submit.min()), int((wl.submit + 3 * wl.runtime).max()) + 1


def _cleanest(hosts: Hosts, lo: int, hi: int) -> tuple[int, ...]:
    means = []
    for trace in hosts.traces:
        rows = (trace.t_ms >= lo) & (trace.t_ms < hi) if trace is not None else None
        means.append(float(trace.values[rows].mean()) if rows is not None and rows.any() else np.inf)
    return tuple(int(i) for i in np.argsort(means, kind="stable"))


def evaluate(experiment: Any, policy: str) -> dict[str, Any]:
    from placement.decision import ORACLE, decide, result_json, settings_from_env  # noqa: F401
    from placement.evaluate import AGNOSTIC, LOWEST_AVERAGE, THRESHOLD
    from scheduling.engine import schedule

    exp = load_experiment(experiment)
    chosen = [s for s in exp.scenarios if s.policy_name.lower() == policy.lower()]
    names = sorted({s.policy_name for s in exp.scenarios if isinstance(s.policy, TimeshiftSpec)})
    if not chosen or not isinstance(chosen[0].policy, TimeshiftSpec):
        raise SpecError(f"--policy {policy!r}: not a timeshift policy of this experiment "
                        f"(its timeshift policies: {', '.join(names) or 'none'}; give one a \"name\")")
    cand = chosen[0].policy_name
    totals = dict.fromkeys((AGNOSTIC, cand, THRESHOLD, LOWEST_AVERAGE, ORACLE), 0.0)
    misses = dict.fromkeys(totals, 0)
    tasks = held = guarded = 0
    for sc in chosen:
        hosts, wl = load_inputs(sc)
        lo, hi = _window(wl)
        ts: TimeshiftSpec = sc.policy
        policies = {
            AGNOSTIC: (ts.placement, None),
            cand: (ts, make_provider(ts.provider, sc.seed, sc.topology.parent)),
            THRESHOLD: (replace(ts, forecast=True, short_threshold=THRESHOLD_Q, long_threshold=THRESHOLD_Q,
                                stopper=None), WindowStatistic(lo, hi)),
            LOWEST_AVERAGE: (CleanestFirst(ts.placement, _cleanest(hosts, lo, hi)), None),
            ORACLE: (ts, make_provider("perfect")),
        }
        runs = {n: schedule(wl, hosts, p, seed=sc.seed, provider=prov) for n, (p, prov) in policies.items()}
        t_end = max(int(r.finish.max()) for r in runs.values())
        for n, r in runs.items():
            s = build(sc, hosts, wl, r, t_end).summary
            totals[n] += s["carbon_g"]
            misses[n] += s["deadline_misses"]
        o = runs[ORACLE]
        held += int((o.deferred_ms > 0).sum())
        guarded += int((o.guard_released & (o.deferred_ms > 0)).sum())
        tasks += wl.n
    ref = totals[AGNOSTIC]
    figures = {n: {"emissions_g": g, "reduction_pct": 100.0 * (1 - g / ref) if ref > 0 else 0.0,
                   "deadline_misses": misses[n]} for n, g in totals.items()}
    settings = settings_from_env()
    verdict = decide(figures, cand, settings)
    trace = {"digest": _digest(exp, chosen), "method": METHOD, "synthetic": False}
    doc = result_json(_TraceView(trace), figures, cand, verdict, settings)
    for n, f in figures.items():
        doc["policies"][n]["deadline_misses"] = f["deadline_misses"]
    doc["scenarios"] = [s.label for s in chosen]
    doc["tasks"] = tasks
    doc["oracle_label"] = ORACLE_LABEL
    doc["oracle_note"] = _oracle_note(totals, ORACLE, cand, chosen[0].policy, held, guarded)
    # placement's reason calls its oracle (an optimiser over the trace) headroom; this one is a rule
    v = doc["verdict"]
    v["reason"] = v["reason"].replace("oracle headroom", "oracle (the rule with perfect foresight, not a bound)")
    doc["policy_spec"] = chosen[0].policy_spec
    return doc


def _oracle_note(totals: dict[str, float], oracle: str, cand: str, ts: TimeshiftSpec,
                 held: int, guarded: int) -> str:
    """Why the oracle lost, when it emits more than another policy; "" when it does not."""
    worse = [n for n, g in totals.items() if n != oracle and g < totals[oracle]]
    if not worse:
        return ""
    return (f"oracle emits more than {', '.join(worse)}: it is {cand}'s greedy rule given the real "
            f"future, not an optimiser; it holds a task while the intensity is not below a quantile "
            f"of the next {ts.forecast_size} h (a trough that may lie past the task's deadline guard), "
            f"and {guarded} of {held} held tasks were released by the deadline guard at whatever "
            f"the intensity was then")


@dataclass(frozen=True)
class _TraceView:
    block: dict

    @property
    def digest(self) -> str:
        return self.block["digest"]

    @property
    def method(self) -> str:
        return METHOD

    @property
    def synthetic(self) -> bool:
        return False


def _digest(exp, scenarios) -> str:
    """sha256 over the policy spec, each scenario's topology file, workload files, carbon trace
    rows and seed: what the figures were measured on."""
    h = hashlib.sha256(orjson.dumps(scenarios[0].policy_spec, option=orjson.OPT_SORT_KEYS))
    for sc in scenarios:
        hosts = load_inputs(sc)[0]
        for f in (sc.topology, sc.workload.path / "tasks.parquet", sc.workload.path / "fragments.parquet"):
            h.update(f.read_bytes())
        for t in hosts.traces:
            if t is not None:
                h.update(t.t_ms.tobytes() + t.values.tobytes())
        h.update(f"{sc.seed}:{sc.workload.sample_fraction}:{sc.workload.submission_time_ms}:"
                 f"{sc.workload.defer_all}".encode())
    return "sha256:" + h.hexdigest()


def identity(doc: dict[str, Any]) -> dict[str, Any]:
    """The policy identity recorded with the evidence: the code that decides and the spec."""
    from placement.identity import builtin_identity, code_digest
    from scheduling import engine, policy, shift
    from schema.canonical import canonical_json, sha256_tag

    spec = sha256_tag(canonical_json(doc["policy_spec"]))
    return builtin_identity(f"simulate:{doc['candidate']}",
                            f"{code_digest(shift.ShiftRules, engine.Loop, policy.FilterPolicy, policy.FewestTasksPolicy)}"
                            f"+spec:{spec}")


def record(doc: dict[str, Any], log: Path) -> dict[str, Any]:
    from placement import audit
    from placement.decision import EVENT_TYPE
    from placement.identity import KEY

    event = {
        "type": EVENT_TYPE, "policy": doc["candidate"], KEY: identity(doc),
        "trace": {**doc["trace"], "basis": "opendc-experiment", "jobs": doc["tasks"]},
        "policies": doc["policies"], "best_simple": doc["best_simple"], "delta_pp": doc["delta_pp"],
        "margin_pp": doc["margin_pp"], "retire_below_pct": _retire(), "verdict": doc["verdict"],
        "evaluated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "scenarios": doc["scenarios"],
    }
    rec = audit.record(log, event)
    return rec.cite()


def _retire() -> float:
    from placement.decision import settings_from_env

    return settings_from_env().retire_below_pct


def register_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", type=Path, help="OpenDC2 experiment JSON")
    parser.add_argument("--policy", required=True, help="the timeshift policy to evaluate (its name)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--record", action="store_true", help="write the evaluation to the placement audit log")
    parser.add_argument("--audit-log", type=Path, help="the audit log (default: placement's, see docs/placement.md)")
    parser.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    try:
        doc = evaluate(args.experiment, args.policy)
        if args.record:
            from placement.audit import resolve_log_path

            doc["recorded"] = record(doc, resolve_log_path(args.audit_log))
    except (SpecError, ValueError, OSError) as exc:
        print(f"carbonspan simulate evaluate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    print(f"{doc['candidate']} on {len(doc['scenarios'])} scenario(s), {doc['tasks']} tasks:")
    for name, f in doc["policies"].items():
        tag = "  (the rule with perfect foresight: not achievable, not a bound)" if name == "oracle" else ""
        print(f"  {name:<24} {f['emissions_g'] / 1000:12.3f} kg  {f['reduction_pct']:+7.2f} %  "
              f"misses {f['deadline_misses']}{tag}")
    if doc["oracle_note"]:
        print(doc["oracle_note"])
    print(f"verdict: {doc['verdict']['action']} ({doc['verdict']['reason']})")
    if "recorded" in doc:
        print(f"recorded: seq {doc['recorded']['seq']} {doc['recorded']['hash']}")
    return 0
