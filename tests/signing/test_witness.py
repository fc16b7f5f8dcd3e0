"""The witness: the tlog-witness add-checkpoint rules, its durable log, its HTTP hardening, and
what it adds for an auditor (forgeries that the agent's own key cannot hide)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import socket
import time

import orjson
import pytest

from agent.checkpoints import CheckpointLog
from carbonspan.cli import main
from schema.checkpoint import CHECKPOINTS_NAME, Checkpoint
from schema.merkle import MerkleTree
from schema.note import COSIGNATURE_V1, Signer, check_signature, sign_note, split_note
from witness.server import WitnessServer
from witness.state import Witness, WitnessError


def verify(root, *flags: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["verify", str(root), *flags])
    return code, out.getvalue()


class Log:
    """A log of numbered leaves signed by ``signer``: checkpoints and add-checkpoint bodies."""

    def __init__(self, signer: Signer) -> None:
        self.signer, self.tree = signer, MerkleTree()

    def grow(self, n: int) -> None:
        for _ in range(n):
            self.tree.append(b"line %d" % self.tree.size)

    def note(self, size: int | None = None, root: bytes | None = None) -> str:
        size = self.tree.size if size is None else size
        cp = Checkpoint(self.signer.name, size, root or self.tree.root(size))
        return sign_note(cp.text(), [self.signer])

    def body(self, old: int, note: str | None = None, proof: list[bytes] | None = None) -> bytes:
        proof = self.tree.consistency_proof(old) if proof is None else proof
        lines = "".join(base64.b64encode(p).decode() + "\n" for p in proof)
        return f"old {old}\n{lines}\n{note or self.note()}".encode()


@pytest.fixture
def setup(tmp_path):
    agent, w = Signer.generate("node-w"), Signer.generate("w.test/1", COSIGNATURE_V1)
    return Log(agent), w, (lambda: Witness(w, {"node-w": agent.verifier}, tmp_path / "state"))


def test_add_checkpoint_follows_the_tlog_witness_rules(setup) -> None:
    log, w, make = setup
    witness = make()
    log.grow(5)
    ok = witness.add_checkpoint(log.body(0))
    assert ok.status == 200
    text, _ = split_note(log.note())
    _, sigs = split_note(text + "\n" + ok.body)
    assert check_signature(text, sigs[0], w.verifier) is not None
    log.grow(3)
    stale = witness.add_checkpoint(log.body(0))  # the client thinks it never cosigned
    assert (stale.status, stale.body, stale.content_type) == (409, "5\n", "text/x.tlog.size")
    assert witness.add_checkpoint(log.body(5, proof=[b"\0" * 32])).status == 422
    assert witness.add_checkpoint(log.body(9, proof=[])).status == 400  # old > size
    assert witness.add_checkpoint(b"old 5\nnot base64!\n\n" + log.note().encode()).status == 400
    stranger = Log(Signer.generate("node-x"))
    stranger.grow(1)
    assert witness.add_checkpoint(stranger.body(0)).status == 404
    forged = Log(Signer.generate("node-w"))  # the right name, another key
    forged.tree = log.tree
    assert witness.add_checkpoint(forged.body(5)).status == 403
    assert witness.add_checkpoint(log.body(5)).status == 200
    fork = log.note(8, b"\1" * 32)
    assert witness.add_checkpoint(log.body(8, fork, [])).status == 409  # same size, other root
    assert witness.add_checkpoint(log.body(8, proof=[])).status == 200  # the same head again


def test_the_witness_remembers_across_restarts_and_refuses_a_broken_log(setup) -> None:
    log, _, make = setup
    log.grow(4)
    assert make().add_checkpoint(log.body(0)).status == 200
    again = make()  # a new process reads its log
    assert again.latest["node-w"][0].size == 4
    log.grow(2)
    assert again.add_checkpoint(log.body(0)).status == 409
    assert again.add_checkpoint(log.body(4)).status == 200
    path = again.path
    lines = path.read_bytes().splitlines()
    path.write_bytes(lines[1] + b"\n")  # its first record deleted
    with pytest.raises(WitnessError, match="not an intact hash chain"):
        make()


def _request(port: int, body: bytes | None, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("POST", "/add-checkpoint")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body:
            conn.send(body)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_http_service_has_deadlines_body_limits_and_a_connection_cap(setup) -> None:
    """The witness is served by httpserve, as the agent's OTLP/HTTP port is."""
    log, _, make = setup
    server = WitnessServer(make(), "127.0.0.1", 0, max_connections=2, timeout_s=0.5,
                           max_body_bytes=4096)
    server.start()
    try:
        log.grow(2)
        body = log.body(0)
        assert _request(server.port, body, {"Content-Length": str(len(body))}) == 200
        assert _request(server.port, None, {}) == 411
        assert _request(server.port, None, {"Content-Length": "5000"}) == 413
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
        time.sleep(0.1)  # both connections held by clients that send nothing
        again = log.body(2, proof=[])  # the same head once more
        assert _request(server.port, again, {"Content-Length": str(len(again))}) == 200
        assert idle[0].recv(1) == b""  # the longest-idle connection was evicted for it
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        slow.sendall(b"POST /add-checkpoint HTTP/1.1\r\nContent-Length: 10\r\n\r\nold")
        assert slow.recv(64).startswith(b"HTTP/1.1 408")  # past the deadline: refused, closed
        for s in (*idle, slow):
            s.close()
        with contextlib.closing(http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)) as c:
            c.request("GET", "/latest/node-w")
            assert c.getresponse().read().decode().startswith("node-w\n2\n")
            c.request("GET", "/healthz")
            assert "timeout=1" in c.getresponse().read().decode()
    finally:
        server.stop()


def test_the_report_of_a_witnessed_archive_verifies_with_the_quorum(signed_archive) -> None:
    s = signed_archive
    code, out = verify(s.root, "--trust", str(s.witnessed), "--witness-log", str(s.witness_log))
    assert code == 0, out
    assert out.count("cosigned by witness.test/w1") == 2


def _rollback(root) -> None:
    """Delete agent-a's last line and every checkpoint record that covered it."""
    d = root / "agent-a"
    files = sorted(d.glob("windows-*.jsonl"))
    lines = files[-1].read_bytes().splitlines()
    files[-1].write_bytes(b"".join(x + b"\n" for x in lines[:-1]))
    if len(lines) == 1:
        files[-1].unlink()
    n = sum(len(f.read_bytes().splitlines()) for f in sorted(d.glob("windows-*.jsonl")))
    keep = [r for r in (d / CHECKPOINTS_NAME).read_bytes().splitlines()
            if int(orjson.loads(r)["note"].split("\n")[1]) <= n]
    (d / CHECKPOINTS_NAME).write_bytes(b"".join(r + b"\n" for r in keep))


def test_a_rollback_passes_the_agents_key_but_not_the_witness(signed_archive) -> None:
    s = signed_archive
    root = s.copy("rollback")
    _rollback(root)
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 0, out  # an earlier state the agent did sign: the documented gap
    code, out = verify(root, "--trust", str(s.witnessed), "--witness-log", str(s.witness_log))
    assert code == 1 and "witnessed_checkpoint_missing" in out, out


def _double_first_window(rec: dict, n: int) -> None:
    if n == 0:
        rec["report"]["window"]["spans"] *= 2


def test_a_forger_with_the_agents_key_but_no_witness_key_cannot_pass(signed_archive, tools) -> None:
    s = signed_archive
    root = s.copy("stolen-key")
    d = root / "agent-a"
    tools.rewrite(d, _double_first_window)
    (d / CHECKPOINTS_NAME).unlink()
    key = Signer.parse((s.keys / "agent-a.key").read_text())
    CheckpointLog(d, key, every=1).open()  # re-signed with the agent's real (stolen) key
    code, out = verify(root, "--trust", str(s.trust))
    assert code == 0, out  # the agent's key alone vouches for the new history...
    code, out = verify(root, "--trust", str(s.witnessed), "--witness-log", str(s.witness_log))
    assert code == 1, out  # ...the witness does not
    assert "witness_quorum_not_met" in out and "witnessed_root_mismatch" in out, out


def test_a_dead_witness_never_blocks_ingest_and_is_counted(tmp_path, tools) -> None:
    tools.make_key(tmp_path / "n.key", "node-d")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cfg = tools.signing_config(tmp_path / "n.key", f'witnesses = "http://127.0.0.1:{dead}"\n'
                               "witness_timeout_s = 1")
    a = tools.start_agent(tmp_path / "arch", "node-d", cfg).wait_ready(timeout=60)
    tools.run_rounds([a], 2)
    a.wait_for(lambda: a.metric("carbonspan_witness_failures_total", reason="unreachable") >= 1,
               what="a counted witness failure")
    assert a.metric("carbonspan_spans_accepted_total") == a.metric("carbonspan_spans_received_total") > 0
    assert a.metric("carbonspan_checkpoints_written_total") >= 2
    assert a.stop() == 0
    assert any("did not cosign" in line for line in a.stderr_text())
