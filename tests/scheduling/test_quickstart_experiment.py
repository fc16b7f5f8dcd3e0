"""The ready-to-run experiment the README and `carbonspan simulate --help` give a newcomer.

scheduling/data/opendc/quickstart/experiment.json names its topologies, workload and carbon
traces relative to its own folder, so it runs from any working directory. The test checks that
every path resolves there, and runs it on a sample of the week's tasks (the same document
with `sampleFraction`, resolved against the same folder) to keep the suite short: every
scenario uses energy, has carbon for all of it and misses no deadline.
"""

from __future__ import annotations

import json
from pathlib import Path

import scheduling
from scheduling.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scheduling" / "data" / "opendc" / "quickstart" / "experiment.json"
COMMAND = "carbonspan simulate run scheduling/data/opendc/quickstart/experiment.json --out results/"


def test_the_documented_command_names_the_shipped_file() -> None:
    from scheduling.cli import EPILOG

    assert QUICKSTART.is_file()
    assert COMMAND in EPILOG
    assert COMMAND in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_path_is_relative_to_its_own_folder() -> None:
    # resolve() tries the referring file's folder before the working directory; none of these
    # names exists under the checkout's root, so only the file's own folder can resolve them
    spec = json.loads(QUICKSTART.read_text(encoding="utf-8"))
    names = [t["pathToFile"] for t in spec["topologies"]] + [w["pathToFile"] for w in spec["workloads"]]
    for name in names:
        assert (QUICKSTART.parent / name).exists() and not (ROOT / name).exists()
    for t in spec["topologies"]:
        topo = json.loads((QUICKSTART.parent / t["pathToFile"]).read_text(encoding="utf-8"))
        for c in topo["clusters"]:
            trace = c["powerSource"]["carbonTracePath"]
            assert (QUICKSTART.parent / trace).is_file() and not (ROOT / trace).exists()
    exp = load_experiment(QUICKSTART)
    assert len(exp.scenarios) == 4  # NL and BE x Mem and Timeshift


def test_it_runs_end_to_end_with_carbon_for_all_its_energy(tmp_path) -> None:
    spec = json.loads(QUICKSTART.read_text(encoding="utf-8"))
    for w in spec["workloads"]:
        w["sampleFraction"] = 0.05
    results = scheduling.simulate(spec, base=QUICKSTART.parent, out=tmp_path / "out")
    assert [r.scenario.label.split("-")[1:2] for r in results] == [["surfsara_NL"]] * 2 + [["surfsara_BE"]] * 2
    for r in results:
        s = r.summary
        assert s["tasks"] > 0 and s["deadline_misses"] == 0
        assert s["energy_j"] > 0 and s["carbon_g"] > 0
        assert s["energy_without_intensity_j"] == 0.0  # the week lies inside the copied traces
