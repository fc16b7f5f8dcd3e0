"""The aggregate bench folds lines of the shape a real agent writes (issue 18, "bench on real
lines"): ``bench/agent_lines.py``'s lines against the lines of a real ``carbonspan agent``
process fed real OTLP requests, key by key, value type by value type, timestamp format by
timestamp format. The old synthetic lines (20-character timestamps) fail this test."""

from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from agent_process import AgentProcess

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench is not an installed package
    sys.path.append(str(REPO))

from bench.agent_lines import replicate, window_bodies  # noqa: E402
from bench.workload import make_request_bytes  # noqa: E402

_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
#: objects keyed by a service, region, host or counter name: their keys are data, not shape
_MAPS = ("per_service_", "counters", "rejected", "measured_sources")


def shape(value: Any, key: str = "") -> Any:
    """The structure of a JSON value: object keys (maps reduced to their values' shape),
    list items merged, scalars by type, timestamps by their exact format."""
    if isinstance(value, dict):
        if key.startswith(_MAPS):
            return ("map", frozenset(shape(v) for v in value.values()))
        return ("obj", tuple(sorted((k, shape(v, k)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", frozenset(shape(v) for v in value))
    if isinstance(value, str) and _TS.match(value):
        return ("time", len(value))
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int | float):
        return "number"  # the agent writes 0.0 and 3 alike as JSON numbers
    if isinstance(value, str) and value.startswith("sha256:"):
        return "digest"
    return "str"


def _differences(a: Any, b: Any, path: str = "$") -> list[str]:
    if a == b:
        return []
    if a[0] == b[0] == "obj":
        da, db = dict(a[1]), dict(b[1])
        out = [f"{path}.{k}: only in the bench's lines" for k in da.keys() - db.keys()]
        out += [f"{path}.{k}: only in the agent's lines" for k in db.keys() - da.keys()]
        for k in da.keys() & db.keys():
            out += _differences(da[k], db[k], f"{path}.{k}")
        return out
    if a[0] == b[0] and a[0] in ("list", "map"):
        if not a[1] or not b[1]:
            return []  # an empty list on one side says nothing about its items
        if len(a[1]) == len(b[1]) == 1:
            return _differences(next(iter(a[1])), next(iter(b[1])), f"{path}[]")
    return [f"{path}: bench {a!r} vs agent {b!r}"[:400]]


def _agent_lines(tmp_path: Path) -> list[dict[str, Any]]:
    root = tmp_path / "archives"
    agent = AgentProcess(root, ["--window-seconds", "1"], {}, None).wait_ready()
    try:
        for seed in range(3):
            req = urllib.request.Request(f"{agent.http_url}/v1/traces", data=make_request_bytes(256, seed),
                                         headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=20) as resp:
                assert resp.status == 200
    finally:
        assert agent.stop() == 0
    return agent.records()


def test_bench_lines_have_the_shape_of_a_real_agents_lines(tmp_path: Path) -> None:
    real = _agent_lines(tmp_path)
    assert real, "the agent archived no window"
    bench = [orjson.loads(line) for line in replicate(window_bodies(10, 2), "agent-0", 3, 1_793_491_200 * 10**9)]
    # the window line: every key, its type, and the 27-character times of window and seal
    want = shape({k: v for k, v in real[0].items()})
    got = shape(bench[0])
    diffs = _differences(got, want)
    assert not diffs, "the bench's lines differ from a real agent's:\n" + "\n".join(diffs)
    assert len(bench[0]["ts"]) == len(real[0]["ts"]) == 27
    assert len(bench[0]["report"]["window"]["start"]) == len(real[0]["report"]["window"]["start"]) == 27
    # the chain is a chain: the aggregator's own reader takes it whole
    assert [r["seq"] for r in bench] == [0, 1, 2] and bench[1]["prev"] == bench[0]["hash"]


def test_the_wide_scenario_changes_its_service_set_every_window() -> None:
    bodies = window_bodies(1000, 3, changing=True)
    sets = [frozenset(b["green_summary"]["per_service_energy_kwh"]) for b in bodies]
    assert all(len(s) >= 990 for s in sets)
    assert len(set(sets)) == 3


def test_the_bench_cuts_chains_into_files_as_the_agent_rotates_them(tmp_path: Path, monkeypatch) -> None:
    """``write_archive(files_per_agent=None)`` lays each chain out as ``ArchiveWriter`` does by
    its defaults: a new file for each UTC day of a line's ``ts`` and before a file would pass
    the size bound, named by that day with a counter, so lexical order is write order and the
    chain reads back whole; ``files_per_agent=N`` cuts it into N files instead."""
    import bench.agent_lines as lines_mod
    from aggregator.files import discover
    from schema.archive import read_order_key

    bodies = window_bodies(10, 2)
    one_a_minute = 2 * 1440 + 100  # windows of a minute: two whole UTC days and 100 more
    write_archive = lines_mod.write_archive
    write_archive(tmp_path / "daily", bodies, one_a_minute, agents=1, files_per_agent=None)
    names = sorted(p.name for p in (tmp_path / "daily" / "agent-0").iterdir())
    assert [n[:17] for n in names] == ["windows-20261101-", "windows-20261102-", "windows-20261103-"]
    counts = [(tmp_path / "daily" / "agent-0" / n).read_bytes().count(b"\n") for n in names]
    assert counts == [1439, 1440, 101]  # the first window ends at 00:01, the 1,440th at 00:00 next day
    first_day = orjson.loads((tmp_path / "daily" / "agent-0" / names[1]).read_bytes().splitlines()[0])
    assert first_day["ts"].startswith("2026-11-02T00:00:00")
    assert len(discover([str(tmp_path / "daily")])) == 3
    assert sorted(names, key=read_order_key) == names
    # the size bound: a file never passes it; the next line starts a new file
    monkeypatch.setattr(lines_mod, "_agent_rotation", lambda: (200_000, True))
    write_archive(tmp_path / "sized", bodies, 100, agents=1, files_per_agent=None)
    sized = sorted((tmp_path / "sized" / "agent-0").iterdir())
    assert len(sized) > 1 and all(p.stat().st_size <= 200_000 for p in sized)
    assert sum(p.read_bytes().count(b"\n") for p in sized) == 100
    write_archive(tmp_path / "small", bodies, 100, agents=2, files_per_agent=5)
    assert [len(list((tmp_path / "small" / a).iterdir())) for a in ("agent-0", "agent-1")] == [5, 5]

