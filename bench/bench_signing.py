"""What signed checkpoints cost (issue 14): the agent's per-line and per-checkpoint work, the
auditor's verify --trust, and end-to-end ingest with signing off and on.

- tree: SHA-256 leaf + node hashes of real-sized window lines (``aggregator.synth``, 10
  services) appended to ``schema.merkle.MerkleTree``, per line;
- checkpoint: one ``CheckpointLog.checkpoint`` (root, consistency proof, Ed25519 signature,
  fsynced append to checkpoints.log), per checkpoint;
- verify: ``verify_signatures`` (every root, every line's inclusion proof) over a signed
  agent directory, against the plain chain check ``verify_archives`` of the same files;
- ingest: ``bench.bench_ingest`` (gRPC, 512-span requests) against an agent with 1-second
  windows, without and with ``[agent.signing]`` (a checkpoint every second: the worst case the
  config allows), alternating A B A B so drift hits both.

    python -m bench signing            # via make bench
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from agent.checkpoints import CheckpointLog
from aggregator import synth
from aggregator.files import discover
from aggregator.verify import verify_archives
from aggregator.verify_signed import verify_signatures
from schema.merkle import MerkleTree
from schema.note import Signer

LINES = 20_000


def _lines(n: int) -> list[bytes]:
    recs = synth.sealed_lines(synth.realistic(n, seed=3, n_services=10))
    return [orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in recs]


def tree_cost(lines: list[bytes]) -> float:
    t0 = time.perf_counter()
    tree = MerkleTree()
    for line in lines:
        tree.append(line)
    tree.root()
    return (time.perf_counter() - t0) / len(lines) * 1e6


def checkpoint_cost(tmp: Path, lines: list[bytes], n: int = 300) -> float:
    d = tmp / "cp"
    d.mkdir()
    cp = CheckpointLog(d, Signer.generate("bench"), every=1)
    for line in lines[:1000]:
        cp.tree.append(line)
    t0 = time.perf_counter()
    for line in lines[1000 : 1000 + n]:
        cp.tree.append(line)
        cp.checkpoint("window")
    return (time.perf_counter() - t0) / n * 1e6


def verify_cost(tmp: Path, lines: list[bytes]) -> tuple[float, float]:
    recs = [orjson.loads(x) for x in lines]
    root = tmp / "archives"
    synth.write_agent(root, "agent-a", synth.split(recs, 4), day="20261101")
    CheckpointLog(root / "agent-a", Signer.generate("agent-a"), every=1).open()
    files = discover([str(root)])
    t0 = time.perf_counter()
    findings, _ = verify_signatures(files)
    signed = time.perf_counter() - t0
    assert findings == [], findings[:3]
    t0 = time.perf_counter()
    verify_archives(files)
    chain = time.perf_counter() - t0
    return len(lines) / signed, len(lines) / chain


def ingest_ab(tmp: Path, pairs: int = 3, seconds: float = 8.0) -> tuple[list[float], list[float]]:
    from bench.bench_ingest import run
    from carbonspan.cli import main as cli

    key = tmp / "bench.key"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli(["keys", "generate", "--name", "bench", "--out", str(key)]) == 0
    off, on = [], []
    for _ in range(pairs):
        for env, out in (({}, off), ({"CARBONSPAN_SIGNING_KEY_FILE": str(key)}, on)):
            r = run(seconds=seconds, agent_env=env, window_seconds=1.0)
            assert r["acked_spans"] == r["archived_spans"], "lost spans"
            out.append(r["spans_per_s"])
    return off, on


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="carbonspan-bench-signing-") as t:
        tmp = Path(t)
        lines = _lines(LINES)
        size = statistics.mean(len(x) for x in lines)
        print(f"window lines: {LINES:,} synthetic lines of 10 services, {size:,.0f} bytes each")
        print(f"  tree append:        {tree_cost(lines):.1f} us per line (leaf + node hashes)")
        print(f"  checkpoint:         {checkpoint_cost(tmp, lines):.0f} us each (root, proof, "
              "Ed25519, fsynced append)")
        signed, chain = verify_cost(tmp, lines)
        print(f"  verify signed heads: {signed:,.0f} lines/s (every inclusion proof); plain "
              f"chain + invariants {chain:,.0f} lines/s")
        off, on = ingest_ab(tmp)
        a, b = statistics.median(off), statistics.median(on)
        print("ingest, OTLP/gRPC 512-span requests, 1-second windows, A/B alternated 3 times:")
        print(f"  signing off:        {a:,.0f} spans/s (runs: {', '.join(f'{x:,.0f}' for x in off)})")
        print(f"  signing on:         {b:,.0f} spans/s (runs: {', '.join(f'{x:,.0f}' for x in on)})")
        print(f"  change:             {100 * (b - a) / a:+.1f} % (limit: -5 %)")


if __name__ == "__main__":
    main()
