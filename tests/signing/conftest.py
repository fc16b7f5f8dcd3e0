"""A real signed two-agent archive, made once per session by real agent processes.

Two ``carbonspan agent`` processes (agent-a, agent-b) with ``[agent.signing]`` keys, small
window files (so they rotate) and 1-second windows receive spans from the OpenTelemetry SDK's
own OTLP/HTTP exporter in several rounds, then stop cleanly. Tests copy the pristine archive
(``signed_archive.copy()``) and tamper with the copy, never with the original.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from agent_process import AgentProcess, wait_for
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from carbonspan.cli import main
from schema.chain import seal

AGENTS = ("agent-a", "agent-b")
WITNESS = "witness.test/w1"
ROUNDS = 5


def make_key(path: Path, name: str, *flags: str) -> str:
    """Generate a key with the real CLI; returns its verifier key text."""
    assert main(["keys", "generate", "--name", name, "--out", str(path), *flags]) == 0
    return path.with_name(path.name + ".pub").read_text().strip()


def send_spans(http_url: str, service: str, requests: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "cloud.region": "eu-west-3"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{http_url}/v1/traces",
                                                                     timeout=10)))
    tracer = provider.get_tracer("carbonspan-signing-test")
    for i in range(requests):
        with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT) as s:
                s.set_attribute("db.system", "postgresql")
                s.set_attribute("db.statement", f"SELECT * FROM t WHERE id = {i}")
    provider.shutdown()


class WitnessProcess:
    """A real ``carbonspan witness`` process on 127.0.0.1 (port 0: the kernel picks)."""

    def __init__(self, key: Path, trust: Path, state: Path, *args: str) -> None:
        cmd = [sys.executable, "-m", "carbonspan", "witness", "--key", str(key), "--trust",
               str(trust), "--state-dir", str(state), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert "listening on 127.0.0.1:" in line, line + self.proc.stderr.read()  # type: ignore[union-attr]
        self.port = int(line.split("127.0.0.1:")[1].split(",")[0])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / "witness.log"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.proc.stderr.close()  # type: ignore[union-attr]
        return code


def signing_config(key: Path, extra: str = "") -> str:
    return (f'[agent.signing]\nkey_file = "{key}"\n{extra}\n'
            "[agent.archive]\nmax_size_mb = 0.006\n")


def start_agent(root: Path, agent_id: str, config: str, *args: str) -> AgentProcess:
    p = AgentProcess(root, ["--window-seconds", "1", "--agent-id", agent_id, *args], {}, config)
    p.agent_id, p.dir = agent_id, root / agent_id
    return p.wait_ready(timeout=60)


def run_rounds(agents: list[AgentProcess], rounds: int) -> None:
    """Each round: every agent gets spans, then a window closes (1-second windows)."""
    for r in range(rounds):
        for p in agents:
            send_spans(p.http_url, f"{p.agent_id}-svc", 3 + r)
        time.sleep(1.3)


@dataclass
class SignedArchive:
    root: Path  # the pristine archive root (never modified by tests)
    keys: Path  # directory of key files, outside the archive
    trust: Path  # keys.toml pinning both agents (and the report signer)
    witnessed: Path  # ... and the witness, with [policy] witness_quorum = 1
    witness_log: Path  # the witness's own log of what it cosigned
    vkeys: dict[str, str]
    tmp: Path

    def copy(self, name: str) -> Path:
        dst = self.tmp / "copies" / name
        shutil.copytree(self.root, dst, ignore=shutil.ignore_patterns("agent.lock"))
        return dst


@pytest.fixture(scope="session")
def signed_archive(tmp_path_factory) -> SignedArchive:
    tmp = tmp_path_factory.mktemp("signed")
    keys, root = tmp / "keys", tmp / "archives"
    keys.mkdir()
    vkeys = {a: make_key(keys / f"{a}.key", a) for a in AGENTS}
    vkeys["reporting"] = make_key(keys / "reporting.key", "reporting")
    vkeys[WITNESS] = make_key(keys / "w1.key", WITNESS, "--witness")
    agents = "[agents]\n" + "".join(f'"{a}" = "{vkeys[a]}"\n' for a in AGENTS)
    trust, witnessed = tmp / "keys.toml", tmp / "keys-witnessed.toml"
    trust.write_text(agents + f'[signers]\nreporting = "{vkeys["reporting"]}"\n')
    witnessed.write_text(agents + f'[signers]\nreporting = "{vkeys["reporting"]}"\n'
                         f'[witnesses]\n"{WITNESS}" = "{vkeys[WITNESS]}"\n'
                         "[policy]\nwitness_quorum = 1\n")
    witness = WitnessProcess(keys / "w1.key", trust, tmp / "witness")
    try:
        extra = f'witnesses = "{witness.url}"'
        procs = [start_agent(root, a, signing_config(keys / f"{a}.key", extra)) for a in AGENTS]
        try:
            run_rounds(procs, ROUNDS)
        finally:
            for p in procs:
                assert p.stop() == 0, "".join(p.stderr_text())
    finally:
        assert witness.stop() == 0
    for a in AGENTS:
        wait_for(lambda a=a: (root / a / "checkpoints.log").exists(), what="checkpoints")
    return SignedArchive(root, keys, trust, witnessed, witness.log, vkeys, tmp)


@dataclass
class Tools:
    """The helpers above, for test modules (which cannot import conftest)."""

    procs: list[AgentProcess]

    make_key = staticmethod(make_key)
    send_spans = staticmethod(send_spans)
    signing_config = staticmethod(signing_config)
    run_rounds = staticmethod(run_rounds)

    @staticmethod
    def rewrite(d: Path, edit: Callable[[dict, int], None]) -> None:
        """A forger's rewrite of agent directory ``d``: ``edit(record, n)`` changes the n-th line
        as it likes, then every line is re-sealed so the hash chain is whole again."""
        prev, n = None, 0
        for path in sorted(d.glob("windows-*.jsonl")):
            out = []
            for raw in path.read_bytes().splitlines():
                rec = orjson.loads(raw)
                edit(rec, n)
                rec = seal(prev, rec["seq"], rec["ts"], "report", rec["report"])
                prev, n = rec["hash"], n + 1
                out.append(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n")
            path.write_bytes(b"".join(out))

    def start_agent(self, root: Path, agent_id: str, config: str, *args: str) -> AgentProcess:
        p = AgentProcess(root, ["--window-seconds", "1", "--agent-id", agent_id, *args], {}, config)
        p.agent_id, p.dir = agent_id, root / agent_id
        self.procs.append(p)
        return p


@pytest.fixture
def tools():
    t = Tools([])
    yield t
    for p in t.procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(timeout=10)
