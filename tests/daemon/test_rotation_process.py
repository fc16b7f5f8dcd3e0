"""Size rotation and gzip of closed files through a real agent, configured by environment."""

from __future__ import annotations

import gzip
import subprocess
import sys

import grpc

from agent.archive import window_files
from bench.workload import make_request_bytes

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_small_files_rotate_and_closed_ones_are_gzipped(start_agent) -> None:
    agent = start_agent("--window-seconds", "0.2", env={
        "CARBONSPAN_ARCHIVE_MAX_SIZE_MB": "0.001",  # ~1 KiB: every window line starts a file
        "CARBONSPAN_ARCHIVE_COMPRESS": "true"})
    channel = grpc.insecure_channel(agent.grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    sent = 0
    for i in range(4):  # one request per window: each window line goes to a file of its own
        export(make_request_bytes(16, seed=i), timeout=10)
        sent += 16
        agent.wait_for(lambda n=i + 1: agent.metric("carbonspan_windows_written_total") >= n,
                       timeout=10, what=f"window {i + 1} to be archived")
    channel.close()
    assert agent.stop() == 0
    files = window_files(agent.dir)
    assert len(files) >= 4
    assert all(f.name.endswith(".jsonl.gz") for f in files[:-1]), files
    assert files[-1].name.endswith(".jsonl")  # the last file stays plain: appendable on restart
    assert not list(agent.dir.glob("*.tmp"))
    with gzip.open(files[0], "rb") as fh:
        assert b'"seq":0' in fh.read()
    records = agent.records()
    assert sum(r["report"]["window"]["spans"] for r in records) == sent
    out = subprocess.run([sys.executable, "-m", "carbonspan", "verify", str(agent.root)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
