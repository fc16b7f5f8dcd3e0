"""carbonspan simulate: OpenDC's own workloads on the SURF topology (docs/simulation.md, "Figures").

- ``surf_week``: OpenDC's week of the SURF Lisa cluster (6,295 tasks, 2,323,475 fragments) on
  OpenDC's ``surfsara_NL`` topology (277 hosts x 16 cores, sqrt 32-180 W) with the 2022 NL
  15-minute trace, the Timeshift prefab and ``deferAll`` (targets: under 60 s on one core,
  peak memory under 1 GB). One simulation: schedule + energy integration, no reference run.
- ``task_scaling/100K_tasks``: OpenDC's own 100K-task scaling workload (100,000 tasks, one
  fragment each, submitted over January 2024; copied into scheduling/data/opendc), Mem prefab
  (target under 60 s).
- growth with tasks (OpenDC's 10K_tasks -> 100K_tasks files, the same month ten times as dense,
  on 277 hosts) and hosts (28 -> 277 -> 2,770 with the 10K file).
- reductions on the real traces (NL, BE) for the shipped time-shifting rules, each against the
  same placement without shifting, with the perfect-forecast headroom beside them.

Each case runs in a fresh process pinned to one CPU (``sched_setaffinity``, Arrow at one
thread), so the peak RSS is that case's own.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "scheduling" / "data" / "opendc"
TRACES = {"NL": DATA / "carbon_traces" / "2022-09-01_2022-11-30_NL.parquet",
          "BE": DATA / "carbon_traces" / "2022-09-01_2022-11-30_BE.parquet"}


def _topology(tmp: Path, zone: str, hosts: int = 277) -> Path:
    spec = json.loads((DATA / "topologies" / "surfsara_NL.json").read_text())
    spec["clusters"][0]["powerSource"]["carbonTracePath"] = str(TRACES[zone])
    spec["clusters"][0]["hosts"][0]["count"] = hosts
    out = tmp / f"surf_{zone}_{hosts}.json"
    out.write_text(json.dumps(spec))
    return out


def _scaling(tasks: str) -> Path:
    """OpenDC's task_scaling workload folder (``10K`` or ``100K``), as copied."""
    folder = DATA / "workload_traces" / "task_scaling" / f"{tasks}_tasks"
    if not (folder / "tasks.parquet").is_file():
        raise FileNotFoundError(f"{folder}: OpenDC's {tasks}_tasks workload is not there "
                                "(scheduling/data/opendc/README.md lists what is copied)")
    return folder


def _experiment(topology: Path, workload: Path, policy: dict, defer: bool) -> dict:
    return {"name": "bench", "topologies": [{"pathToFile": str(topology)}],
            "workloads": [{"pathToFile": str(workload), "type": "ComputeWorkload", "deferAll": defer}],
            "allocationPolicies": [policy], "exportModels": [{"exportInterval": 3600}]}


def case(name: str, tmp: Path) -> dict:
    """One measured simulation (run in a child process)."""
    import pyarrow as pa

    from scheduling.experiment import load_experiment
    from scheduling.run import run_scenario

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    kind, _, arg = name.partition(":")
    timeshift = {"type": "prefab", "policyName": "Timeshift"}
    mem = {"type": "prefab", "policyName": "Mem"}
    if kind == "surf_week":
        exp = _experiment(_topology(tmp, "NL"), DATA / "workload_traces" / "surf_week", timeshift, True)
    elif kind == "tasks":
        exp = _experiment(_topology(tmp, "NL"), _scaling(arg), mem, False)
    elif kind == "hosts":
        exp = _experiment(_topology(tmp, "NL", int(arg)), _scaling("10K"), mem, False)
    else:
        raise ValueError(name)
    (sc,) = load_experiment(exp).scenarios
    t0 = time.perf_counter()
    res = run_scenario(sc, reference=False)
    dt = time.perf_counter() - t0
    frags = int(res.tables["task"].num_rows and _fragments(sc))
    return {"case": name, "seconds": dt, "tasks": res.summary["tasks"], "fragments": frags,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "carbon_kg": res.summary["carbon_g"] / 1000, "misses": res.summary["deadline_misses"]}


def _fragments(sc) -> int:
    from scheduling.run import load_inputs

    return int(load_inputs(sc)[1].frag_duration.size)


def reductions(zone: str, tmp: Path) -> list[dict]:
    from scheduling.experiment import load_experiment

    rules = {
        "Timeshift prefab (persistence)": {"type": "prefab", "policyName": "Timeshift"},
        "Timeshift, noisy 9 % MAPE": {"type": "timeshift", "memorize": False,
                                      "weighers": [{"type": "Ram"}], "forecastProvider": {"type": "noisy"}},
        "Timeshift, forecast false (past-week mean)": {"type": "timeshift", "memorize": False,
                                                       "weighers": [{"type": "Ram"}], "forecast": False},
        "Timeshift + task stopper (persistence)": {"type": "timeshift", "memorize": False,
                                                   "weighers": [{"type": "Ram"}], "taskStopper": {}},
        "Timeshift, perfect (headroom, not achievable)": {"type": "timeshift", "memorize": False,
                                                          "weighers": [{"type": "Ram"}],
                                                          "forecastProvider": "perfect"},
    }
    from scheduling.engine import schedule
    from scheduling.forecast import make_provider
    from scheduling.run import build, load_inputs

    # the no-shift reference is the same for every rule (Ram-weighed placement): run it once,
    # and integrate every run over one common window
    scs = {label: load_experiment(_experiment(_topology(tmp, zone), DATA / "workload_traces" / "surf_week",
                                              pol, True)).scenarios[0] for label, pol in rules.items()}
    first = next(iter(scs.values()))
    hosts, wl = load_inputs(first)
    runs = {label: schedule(wl, hosts, sc.policy, seed=sc.seed,
                            provider=make_provider(sc.policy.provider, sc.seed)) for label, sc in scs.items()}
    ref = schedule(wl, hosts, first.policy.placement, seed=first.seed)
    t_end = max(int(r.finish.max()) for r in (*runs.values(), ref))
    c0 = build(first, hosts, wl, ref, t_end).summary["carbon_g"]
    out = []
    for label, sch in runs.items():
        s = build(scs[label], hosts, wl, sch, t_end).summary
        out.append({"zone": zone, "rule": label, "reduction_pct": 100 * (1 - s["carbon_g"] / c0),
                    "misses": s["deadline_misses"], "mean_delay_h": s["mean_delay_ms"] / 3.6e6})
    return out


def _child(name: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    code = ("import os, sys, json, tempfile; from pathlib import Path; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
            "from bench.bench_simulate import case, reductions;"
            "tmp = Path(tempfile.mkdtemp()); n = sys.argv[1];"
            "print(json.dumps(reductions(n[4:], tmp) if n.startswith('red:') else case(n, tmp)))")
    p = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1], env=env, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"{name}: {p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory():
        r = _child("surf_week")
        print(f"surf_week, Timeshift prefab, NL trace, deferAll, 277 hosts, one core: {r['seconds']:.1f} s "
              f"(target < 60 s), peak RSS {r['peak_rss_mb']:.0f} MB (target < 1024), "
              f"{r['tasks'] / r['seconds']:,.0f} tasks/s, {r['fragments'] / r['seconds']:,.0f} fragments/s, "
              f"{r['misses']} deadline misses", flush=True)
        times = {}
        for n in ("tasks:10K", "tasks:100K"):
            times[n] = _child(n)
        big = times["tasks:100K"]
        print(f"task_scaling/100K_tasks (OpenDC's file), Mem: {big['seconds']:.1f} s (target < 60 s), "
              f"{big['tasks'] / big['seconds']:,.0f} tasks/s, {big['fragments'] / big['seconds']:,.0f} "
              f"fragments/s, peak RSS {big['peak_rss_mb']:.0f} MB; tasks x10 (10K_tasks -> 100K_tasks): "
              f"time x{big['seconds'] / times['tasks:10K']['seconds']:.1f}", flush=True)
        hosts = {n: _child(f"hosts:{n}") for n in (28, 277, 2770)}
        print("hosts x10 (10K tasks): " + ", ".join(
            f"{n} hosts {h['seconds']:.1f} s" for n, h in hosts.items())
            + f"; 277 -> 2,770: time x{hosts[2770]['seconds'] / hosts[277]['seconds']:.1f}", flush=True)
        print("reductions on surf_week (deferAll), against the same placement without shifting:")
        for zone in ("NL", "BE"):
            for row in _child_list(f"red:{zone}"):
                print(f"  {row['zone']} {row['rule']:<48} {row['reduction_pct']:+6.2f} %  "
                      f"misses {row['misses']}  mean delay {row['mean_delay_h']:.2f} h", flush=True)


def _child_list(name: str) -> list[dict]:
    return _child(name)  # type: ignore[return-value]


if __name__ == "__main__":
    main()
