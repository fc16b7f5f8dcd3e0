"""What the agent keeps of a witness's answer. A witness (or anyone between it and the agent on
plain HTTP) answers add-checkpoint with signature lines the agent appends to its own note; a
line under the agent's own key name, or one that is no tlog-cosignature/v1, would make the
agent's checkpoint fail verification and, after a restart, stop the agent signing. Tested with
a loopback server that speaks the tlog-witness protocol but answers what a hostile witness
would, against the agent's real pusher and checkpoint log on real files."""

from __future__ import annotations

import http.server
import threading

import orjson
import pytest

from agent.archive import ArchiveWriter
from agent.checkpoints import CheckpointLog
from agent.metrics import AgentMetrics
from agent.witness_push import WitnessPusher
from aggregator.files import discover
from aggregator.verify_signed import verify_signatures
from schema.checkpoint import CHECKPOINTS_NAME
from schema.note import COSIGNATURE_V1, Signature, Signer, cosign, split_note
from schema.trust import Trust


class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers 200 with ``answer(note)``: whatever lines a hostile witness chooses."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        note = body.decode().partition("\n\n")[2]
        data = type(self).answer(note)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _answers(agent: Signer, witness: Signer) -> dict:
    """Answers of a hostile witness to a checkpoint note, and the one honest line among them."""
    def honest(text: str) -> str:
        return cosign(text, witness, 1700000000).line()

    def text_of(note: str) -> str:
        return split_note(note)[0]

    return {
        "as_the_agent": lambda n: (honest(text_of(n)) + Signature(
            agent.name, agent.verifier.key_id, b"\1" * 64).line()).encode(),
        "not_a_cosignature": lambda n: (honest(text_of(n)) + Signature(
            "witness.test/evil", b"abcd", b"\2" * 64).line()).encode(),
        "repeats_a_line": lambda n: (honest(text_of(n)) * 2).encode(),
    }


@pytest.mark.parametrize("case", ["as_the_agent", "not_a_cosignature", "repeats_a_line"])
def test_only_the_witness_cosignatures_of_an_answer_are_kept(tmp_path, case: str) -> None:
    agent, witness = Signer.generate("node-h"), Signer.generate("witness.test/w1", COSIGNATURE_V1)
    _Hostile.answer = staticmethod(_answers(agent, witness)[case])
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    d = tmp_path / "archives" / "node-h"
    writer = ArchiveWriter(d)
    writer.open()
    metrics = AgentMetrics()
    cp = CheckpointLog(d, agent, every=1, metrics=metrics)
    pusher = WitnessPusher(cp, [f"http://127.0.0.1:{server.server_port}"], 5.0)
    cp.pusher = pusher
    pusher.start()
    try:
        cp.open()
        writer.listener = cp
        writer.append({"agent_id": "node-h", "window": {"start": "2026-12-01T00:00:00Z"}})
        for _ in range(100):
            recs = (d / CHECKPOINTS_NAME).read_bytes().splitlines()
            if any(orjson.loads(r)["reason"] == "cosigned" for r in recs):
                break
            threading.Event().wait(0.1)
    finally:
        pusher.stop(5.0)
        server.shutdown()
        server.server_close()
        writer.close()
    cosigned = [orjson.loads(r) for r in (d / CHECKPOINTS_NAME).read_bytes().splitlines()
                if orjson.loads(r)["reason"] == "cosigned"]
    assert len(cosigned) == 1
    _, sigs = split_note(cosigned[0]["note"])
    assert [s.name for s in sigs] == ["node-h", "witness.test/w1"]  # the hostile line dropped
    trust = Trust.from_table({"agents": {"node-h": agent.verifier.encode()},
                              "witnesses": {"witness.test/w1": witness.verifier.encode()},
                              "policy": {"witness_quorum": 1}})
    findings, summaries = verify_signatures(discover([str(tmp_path / "archives")]), trust)
    assert findings == [] and summaries[0].cosigners == ["witness.test/w1"]
    again = CheckpointLog(d, agent, every=1)
    again.open()  # a restarted agent still trusts its own last checkpoint
    assert again.conflict is None
    dropped = metrics.witness_failures.labels(f"http://127.0.0.1:{server.server_port}",
                                              "bad_response")._value.get()
    assert dropped == 0  # the honest line was kept, so the push counts as cosigned


def test_an_answer_with_no_cosignature_is_a_counted_bad_response(tmp_path) -> None:
    agent = Signer.generate("node-h")
    _Hostile.answer = staticmethod(lambda n: Signature(agent.name, agent.verifier.key_id,
                                                       b"\1" * 64).line().encode())
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    d = tmp_path / "node-h"
    d.mkdir()
    metrics = AgentMetrics()
    cp = CheckpointLog(d, agent, every=1, metrics=metrics)
    url = f"http://127.0.0.1:{server.server_port}"
    pusher = WitnessPusher(cp, [url], 5.0)
    cp.pusher = pusher
    pusher.start()
    failed = metrics.witness_failures.labels(url, "bad_response")._value
    try:
        cp.tree.append(b'{"line": 1}')
        cp.checkpoint("window")
        for _ in range(100):
            if failed.get() >= 1:
                break
            threading.Event().wait(0.1)
    finally:
        pusher.stop(5.0)
        server.shutdown()
        server.server_close()
    assert failed.get() == 1
    assert [orjson.loads(r)["reason"] for r in (d / CHECKPOINTS_NAME).read_bytes().splitlines()] == ["window"]
