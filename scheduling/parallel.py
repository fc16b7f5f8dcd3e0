"""Scenarios run one after another, or in parallel on Dask (``--engine dask``): each scenario
is independent and deterministic from its seed, so the results are identical either way and
come back in scenario order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduling.experiment import Scenario


def _one(sc: Scenario, compat: bool) -> Any:
    from scheduling.run import run_scenario

    return run_scenario(sc, compat=compat)


def run_all(scenarios: list[Scenario], *, compat: bool = False, engine: str = "local",
            scheduler: str | None = None,
            progress: Callable[[int, int, str], None] | None = None) -> list[Any]:
    n = len(scenarios)
    if engine == "local":
        out = []
        for k, sc in enumerate(scenarios):
            if progress:
                progress(k, n, sc.label)
            out.append(_one(sc, compat))
        if progress:
            progress(n, n, "done")
        return out
    if engine != "dask":
        raise ValueError(f"engine {engine!r}: use local or dask")
    from distributed import Client, as_completed

    # the in-process scheduler's HTTP server would take 8787 by default: port 0 on loopback
    client = Client(scheduler) if scheduler else Client(processes=False, dashboard_address="127.0.0.1:0")
    try:
        futures = [client.submit(_one, sc, compat, pure=False) for sc in scenarios]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * n
        for done, fut in enumerate(as_completed(futures), 1):
            results[index[fut.key]] = fut.result()
            if progress:
                progress(done, n, scenarios[index[fut.key]].label)
        return results
    finally:
        client.close()
