"""The auditor's checks of signed heads: checkpoints, Merkle proofs, pinned keys, witnesses.

For each agent directory this rebuilds the RFC 6962 tree over its window lines (the exact bytes
of each line) and checks every record of its ``checkpoints.log`` against it:

- the note is a C2SP signed checkpoint whose origin is the directory's agent id, signed by the
  key pinned for that agent (``--trust keys.toml``);
- consecutive checkpoints are consistent (the agent's stored RFC 9162 consistency proof
  verifies; one size never has two roots; sizes never go back);
- each checkpoint's root is the root of the first ``size`` lines; every line under the latest
  matching checkpoint has its inclusion proof computed and verified;
- lines after the last checkpoint are reported as not yet checkpointed;
- pinned witnesses' cosignatures verify, the latest checkpoint has ``witness_quorum`` of them,
  and a witness's own log (``--witness-log``) names no head the archive no longer holds.

Every failure is a named :class:`aggregator.verify.Finding`; docs/auditors-guide.md explains
each kind and what it does and does not prove.
"""

from __future__ import annotations

import base64
import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from aggregator.signed_read import AgentLog, CheckpointRecord, read_agent, read_witness_log
from aggregator.verify import Finding
from schema.checkpoint import Checkpoint
from schema.merkle import ProofError, verify_consistency, verify_inclusion
from schema.note import check_signature, matching
from schema.trust import Trust

UNVERIFIED = "signed but unverified (no key pinned)"


@dataclass
class SignedSummary:
    agent: str
    status: str  # "unsigned" | "signed" | UNVERIFIED
    lines: int = 0
    checkpoints: int = 0
    latest: Checkpoint | None = None
    latest_note: str = ""
    proven: int = 0
    cosigners: list[str] = field(default_factory=list)
    log: AgentLog | None = field(default=None, repr=False)

    def describe(self) -> str:
        if self.latest is None:
            return f"{self.status}: {self.lines} lines, no checkpoint"
        extra = f", cosigned by {', '.join(self.cosigners)}" if self.cosigners else ""
        return (f"{self.status}: {self.checkpoints} checkpoints, the latest covers "
                f"{self.latest.size} of {self.lines} lines; {self.proven} inclusion proofs "
                f"verified{extra}")


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


class _AgentCheck:
    def __init__(self, log: AgentLog, trust: Trust | None) -> None:
        self.log, self.trust, self.agent = log, trust, log.agent
        self.findings: list[Finding] = []
        self.pinned = trust.agents.get(log.agent) if trust is not None else None

    def add(self, location: str, kind: str, message: str) -> None:
        self.findings.append(Finding(location, kind, message))

    def where(self, index: int) -> str:
        """``agent/file:line`` of leaf ``index``."""
        starts = [s for s, _ in self.log.files]
        i = bisect.bisect_right(starts, index) - 1
        if i < 0:
            return f"{self.agent}/"
        start, label = self.log.files[i]
        return f"{label}:{index - start + 1}"

    def run(self) -> SignedSummary:
        log = self.log
        for index, agent_id in log.foreign_ids:
            self.add(self.where(index), "agent_id_mismatch",
                     f"the line says agent_id {agent_id!r} but sits in {self.agent!r}'s "
                     "directory: a chain was copied in from another agent")
        if not log.records:
            return self._unsigned()
        summary = SignedSummary(self.agent, "signed" if self.pinned else UNVERIFIED,
                                lines=log.tree.size)
        accepted = [r for r in log.records if self._authentic(r)]
        if not accepted:  # every record was refused (each is a finding): nothing vouches
            summary.status = "signed, no checkpoint verifies"
            return summary
        self._sequence(accepted)
        self._roots(accepted, summary)
        self._witnesses(accepted, summary)
        return summary

    def _unsigned(self) -> SignedSummary:
        if self.pinned is not None:
            self.add(f"{self.agent}/", "unsigned_archive",
                     f"a key is pinned for {self.agent!r} but its directory has no checkpoints.log: "
                     "the signed heads were removed, or the agent ran without [agent.signing]")
        elif self.trust is not None:
            self.add(f"{self.agent}/", "agent_not_pinned",
                     f"keys are pinned (--trust) but none for agent {self.agent!r}: its archive "
                     "cannot be authenticated; add it to [agents] or leave it out")
        return SignedSummary(self.agent, "unsigned", lines=self.log.tree.size)

    def _authentic(self, r: CheckpointRecord) -> bool:
        if r.error:
            self.add(r.location, "checkpoint_malformed", r.error)
            return False
        cp = r.checkpoint
        assert cp is not None
        if cp.origin != self.agent:
            self.add(r.location, "checkpoint_origin_mismatch",
                     f"the checkpoint is of log {cp.origin!r} but sits in {self.agent!r}'s "
                     "directory: checkpoints were copied in from another agent")
            return False
        if self.trust is None:
            return True
        if self.pinned is None:
            self.add(r.location, "agent_not_pinned",
                     f"keys are pinned (--trust) but none for agent {self.agent!r}")
            return False
        mine = matching(r.signatures, self.pinned)
        if not mine or any(check_signature(r.text, s, self.pinned) is None for s in mine):
            self.add(r.location, "checkpoint_bad_signature",
                     f"the checkpoint of size {cp.size} is not signed by {self.agent!r}'s pinned "
                     f"key {self.pinned.key_id.hex()}: it was forged or re-signed with another key")
            return False
        return True

    def _sequence(self, records: list[CheckpointRecord]) -> None:
        """Sizes never go back, one size has one root, stored consistency proofs verify."""
        seen: dict[int, bytes] = {}
        prev: Checkpoint | None = None
        for r in records:
            cp = r.checkpoint
            assert cp is not None
            if cp.size in seen:
                if seen[cp.size] != cp.root:
                    self.add(r.location, "checkpoint_fork",
                             f"two signed checkpoints of size {cp.size} with different roots")
                continue
            if prev is not None and cp.size < prev.size:
                self.add(r.location, "checkpoint_rollback",
                         f"size {cp.size} after a checkpoint of size {prev.size}")
                continue
            if prev is not None and r.proof is not None:
                old, proof = r.proof
                try:
                    if old != prev.size:
                        raise ProofError(f"the proof starts at size {old}, not {prev.size}")
                    verify_consistency(prev.size, cp.size, prev.root, cp.root, proof)
                except ProofError as exc:
                    self.add(r.location, "checkpoint_inconsistent",
                             f"checkpoint {cp.size} does not extend checkpoint {prev.size} ({exc})")
            seen[cp.size] = cp.root
            prev = cp

    def _roots(self, records: list[CheckpointRecord], summary: SignedSummary) -> None:
        tree = self.log.tree
        distinct: dict[tuple[int, bytes], CheckpointRecord] = {}
        for r in records:
            assert r.checkpoint is not None
            distinct.setdefault((r.checkpoint.size, r.checkpoint.root), r)
        summary.checkpoints = len(distinct)
        good: Checkpoint | None = None
        good_sizes: list[int] = []
        bad: list[CheckpointRecord] = []
        for r in distinct.values():
            cp = r.checkpoint
            assert cp is not None
            if cp.size > tree.size:
                self.add(r.location, "checkpoint_beyond_archive",
                         f"the agent signed {cp.size} lines but the directory holds {tree.size}: "
                         f"lines {tree.size + 1}..{cp.size} were deleted")
            elif tree.root(cp.size) != cp.root:
                bad.append(r)
            else:
                good_sizes.append(cp.size)
                if good is None or cp.size > good.size:
                    good = cp
        if bad:
            first = min(bad, key=lambda r: r.checkpoint.size)  # type: ignore[union-attr]
            size = first.checkpoint.size  # type: ignore[union-attr]
            below = max((n for n in good_sizes if n < size), default=0)
            self.add(first.location, "checkpoint_root_mismatch",
                     f"the first {size} lines do not hash to the root the agent signed "
                     f"({len(bad)} checkpoint(s) disagree with the lines): a line in "
                     f"{self.where(below)} .. {self.where(size - 1)} was changed, inserted, "
                     "removed or reordered after it was signed")
        latest = max((r.checkpoint for r in distinct.values()), key=lambda c: c.size)  # type: ignore[union-attr]
        summary.latest = latest
        summary.latest_note = max(
            (r for r in records if r.checkpoint == latest), key=lambda r: len(r.signatures)).note
        if good is not None:
            summary.proven = self._inclusion(good)
        if tree.size > latest.size:
            self.add(self.where(latest.size), "not_checkpointed",
                     f"lines {latest.size + 1}..{tree.size} come after the last signed checkpoint "
                     f"(size {latest.size}): not yet checkpointed, so nothing vouches for them "
                     "(appended later, or the agent stopped before signing; verify a closed period)")

    def _inclusion(self, cp: Checkpoint) -> int:
        tree, proven = self.log.tree, 0
        for i in range(cp.size):
            try:
                verify_inclusion(i, cp.size, tree.leaf(i), tree.inclusion_proof(i, cp.size), cp.root)
                proven += 1
            except ProofError as exc:
                self.add(self.where(i), "inclusion_failed", str(exc))
        return proven

    def _witnesses(self, records: list[CheckpointRecord], summary: SignedSummary) -> None:
        if self.trust is None:
            return
        latest = summary.latest
        names: set[str] = set()
        for r in records:
            for w in self.trust.witnesses.values():
                for s in matching(r.signatures, w):
                    if check_signature(r.text, s, w) is None:
                        self.add(r.location, "cosignature_invalid",
                                 f"the cosignature by witness {w.name!r} does not verify")
                    elif r.checkpoint == latest:
                        names.add(w.name)
        summary.cosigners = sorted(names)
        if latest is not None and len(names) < self.trust.witness_quorum:
            self.add(f"{self.agent}/checkpoints.log", "witness_quorum_not_met",
                     f"the latest checkpoint (size {latest.size}) has {len(names)} valid witness "
                     f"cosignature(s); [policy] witness_quorum asks {self.trust.witness_quorum}")


def _witness_findings(summaries: dict[str, SignedSummary], logs: dict[str, AgentLog],
                      witnessed: dict[str, tuple[str, Checkpoint]], trust: Trust | None) -> list[Finding]:
    out = []
    for origin, (where, cp) in sorted(witnessed.items()):
        log = logs.get(origin)
        if log is None:
            continue
        latest = summaries[origin].latest
        if cp.size > log.tree.size:
            out.append(Finding(where, "witnessed_checkpoint_missing",
                               f"the witness cosigned {origin!r} at size {cp.size} but the archive "
                               f"holds {log.tree.size} lines: its tail was deleted"))
        elif log.tree.root(cp.size) != cp.root:
            out.append(Finding(where, "witnessed_root_mismatch",
                               f"the first {cp.size} lines of {origin!r} do not hash to the root "
                               "the witness cosigned: history was rewritten"))
        elif latest is None or latest.size < cp.size:
            out.append(Finding(where, "checkpoints_rolled_back",
                               f"the witness cosigned {origin!r} at size {cp.size} but the archive's "
                               f"latest checkpoint is {latest.size if latest else 'missing'}"))
    return out


def verify_signatures(files: Sequence, trust: Trust | None = None,
                      witness_logs: Sequence = ()) -> tuple[list[Finding], list[SignedSummary]]:
    """Check each agent's signed heads against its lines; findings and one summary per agent."""
    findings: list[Finding] = []
    summaries: dict[str, SignedSummary] = {}
    logs: dict[str, AgentLog] = {}
    dirs: dict[str, str] = {}
    for where, group in groupby(files, key=lambda f: f.group):
        log = read_agent(list(group))
        check = _AgentCheck(log, trust)
        summary = check.run()
        findings.extend(check.findings)
        if log.agent in dirs:
            if trust is not None or log.records or logs[log.agent].records:
                findings.append(_duplicate(log.agent, dirs[log.agent], where))
            continue
        summary.log, summaries[log.agent], logs[log.agent], dirs[log.agent] = log, summary, log, where
    witnessed: dict[str, tuple[str, Checkpoint]] = {}
    for path in witness_logs:
        found, heads = read_witness_log(path, trust)
        findings.extend(found)
        for origin, head in heads.items():
            if origin not in witnessed or head[1].size > witnessed[origin][1].size:
                witnessed[origin] = head
    findings.extend(_witness_findings(summaries, logs, witnessed, trust))
    findings.extend(_missing_agents(logs, witnessed, trust))
    return findings, list(summaries.values())


def _duplicate(agent: str, first: str, again: str) -> Finding:
    return Finding(f"{agent}/", "duplicate_agent",
                   f"agent {agent!r} has a chain in two directories ({first} and {again}): one "
                   "log cannot be in two places, and aggregate would count its windows twice; "
                   "keep the directory its checkpoints and witnesses vouch for")


def _missing_agents(logs: dict[str, AgentLog], witnessed: dict[str, tuple[str, Checkpoint]],
                    trust: Trust | None) -> list[Finding]:
    """An agent pinned in keys.toml whose directory is not among the archives: its whole
    archive was removed (or not given). Verify a subset with a keys.toml of that subset."""
    if trust is None:
        return []
    out = []
    for agent in sorted(set(trust.agents) - set(logs)):
        seen = witnessed.get(agent)
        extra = f"; a witness cosigned it at size {seen[1].size} ({seen[0]})" if seen else ""
        out.append(Finding(f"{agent}/", "pinned_agent_missing",
                           f"a key is pinned for agent {agent!r} but no directory of it is among "
                           f"the archives given{extra}: its whole archive was removed, or give "
                           "its directory (to verify a subset, pin only that subset)"))
    return out
