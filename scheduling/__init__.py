"""Cluster simulation with OpenDC-style inputs, allocation policies and carbon-aware
time-shifting (docs/simulation.md).

    import scheduling
    results = scheduling.simulate("experiment.json")       # list of Result
    results[0].tables["task"]                               # pyarrow.Table
    results[0].summary["carbon_g"]

The pieces are usable on their own: ``scheduling.policy`` (filters, weighers, ``HostState``),
``scheduling.prefabs`` (``make_policy``), ``scheduling.forecast`` (providers with as-of
semantics), ``scheduling.carbon`` (traces), ``scheduling.engine.schedule`` and
``scheduling.energy.integrate``. scheduling/ imports neither the agent nor the aggregator.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduling.experiment import Experiment, Scenario, load_experiment
from scheduling.topology import SpecError

__all__ = ["simulate", "load_experiment", "Experiment", "Scenario", "SpecError"]


def simulate(experiment: str | Path | dict, *, compat: bool = False, engine: str = "local",
             scheduler: str | None = None, out: Path | None = None,
             progress: Callable[[int, int, str], None] | None = None,
             base: Path | None = None) -> list[Any]:
    """Run every scenario of an experiment (a path or the parsed JSON); optionally write outputs."""
    from scheduling.outputs import write_result
    from scheduling.parallel import run_all

    exp = load_experiment(experiment, base=base, compat=compat)
    results = run_all(exp.scenarios, compat=compat, engine=engine, scheduler=scheduler,
                      progress=progress)
    if out is not None:
        for r in results:
            write_result(r, out)
    return results
