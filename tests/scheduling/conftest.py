"""Fixtures for the simulator tests: real parquet workloads and carbon traces written to tmp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sim_inputs import HOUR, T0, write_topology, write_trace, write_workload


@pytest.fixture
def files(tmp_path: Path) -> Any:
    class Files:
        root = tmp_path

        @staticmethod
        def workload(tasks: list[dict], name: str = "wl") -> Path:
            return write_workload(tmp_path / name, tasks)

        @staticmethod
        def trace(values: list[float], step: int = HOUR, start: int = T0, name: str = "trace.parquet") -> Path:
            return write_trace(tmp_path / name, start, step, values)

        @staticmethod
        def topology(clusters: list[dict], name: str = "topo.json") -> Path:
            return write_topology(tmp_path / name, clusters)

    return Files
