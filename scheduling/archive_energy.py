"""Energy per run from carbonspan archives, for contracts that name a ``service`` instead of
``energy_kwh`` (docs/contracts.md, "Energy from archives").

The archives are read through their documented format (docs/archive-format.md: one directory
per agent, ``windows-*.jsonl[.gz]`` in lexical = write order, one hash-chained line per window);
``scheduling`` may not import the aggregator, so this reader uses only ``schema`` (the layout
and line reading of ``schema.archive``, the window times of ``schema.times``, the chain).
Every agent's chain is verified first (``schema.chain.verify_chain``): an archive whose chain
is broken is refused, naming the first break, since energy read from it could not be checked.

A run's energy is the service's energy in the archived windows that overlap the run's
[started, finished) interval, each window counted pro rata for the part of it the run covers
(``per_service_energy_kwh[service] x overlap / window length``), summed over the agents whose
windows hold the service. That is what the service drew while the job ran, which for a batch
job is the job. A run is **not measured** (its energy ``None``, with the reason and the
uncovered intervals), never zero, when no window holds the service during the run, or when an
agent that holds it has a gap in its windows during the run (an agent archives a window
without spans only with ``[[green.hosts]]``, so a stopped agent and an idle one look alike),
or when a window may hide the service in ``(other)`` (``service_overflow``).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from schema import times
from schema.archive import (
    BODY_KEY,
    ArchiveReadError,
    LongLine,
    agent_directories,
    numbered_lines,
    window_files,
)
from schema.chain import verify_chain
from schema.signal_log import iso

GAP_TOLERANCE_MS = 1_000  # windows of one agent follow each other; rounding may leave < 1 s


class ArchiveError(ValueError):
    """Archives that cannot be used; the message names the file, the line and what to do."""


@dataclass(frozen=True, slots=True)
class Window:
    start: int
    end: int
    energy: dict[str, float]
    overflow: bool  # some services of the window went to "(other)"


@dataclass
class Chain:
    agent: str
    windows: list[Window]
    lines: int
    head: str | None  # hash of the last line
    starts: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RunEnergy:
    kwh: float | None  # None: not measured
    windows: int
    agents: tuple[str, ...]
    reason: str  # "" when measured
    missing: tuple[tuple[str, str, str], ...] = ()  # (agent, from, to) not covered

    def to_json(self, service: str) -> dict[str, Any]:
        doc: dict[str, Any] = {"source": "archives", "service": service, "kwh": self.kwh, "windows": self.windows,
                               "agents": list(self.agents)}
        if self.kwh is None:
            doc.update(status="not_measured", reason=self.reason, missing=[list(m) for m in self.missing])
        else:
            doc["status"] = "measured"
        return doc


def _lines(path: Path) -> list[tuple[str, bytes | None]]:
    """(file:line, raw or None for a line over MAX_LINE_BYTES) of a window file, read by the
    archive's rules (``schema.archive.numbered_lines``)."""
    out: list[tuple[str, bytes | None]] = []
    n = 0
    try:
        for n, line in numbered_lines(path):  # noqa: B007 - n is used after the loop
            # a line past the limit is malformed, as for every reader (archive-format.md)
            out.append((f"{path.name}:{n}", None if type(line) is LongLine else line))
    except (OSError, ArchiveReadError) as exc:
        raise ArchiveError(f"{path}: unreadable after line {n} ({exc}); run `carbonspan verify` on it") from None
    return out


def _window(rec: dict[str, Any], where: str) -> Window:
    report = rec.get(BODY_KEY) if isinstance(rec.get(BODY_KEY), dict) else {}
    w = report.get("window") if isinstance(report.get("window"), dict) else {}
    start, end = _ms(w.get("start"), f"{where} window.start"), _ms(w.get("end"), f"{where} window.end")
    gs = report.get("green_summary") if isinstance(report.get("green_summary"), dict) else {}
    raw = gs.get("per_service_energy_kwh") if isinstance(gs.get("per_service_energy_kwh"), dict) else {}
    energy = {}
    for k, v in raw.items():
        if not isinstance(v, int | float) or isinstance(v, bool) or not v >= 0 or v == float("inf"):
            raise ArchiveError(f"{where}: per_service_energy_kwh[{k!r}] = {v!r} is not a finite number >= 0")
        energy[str(k)] = float(v)
    counters = report.get("counters") if isinstance(report.get("counters"), dict) else {}
    return Window(start, max(start, end), energy, bool(counters.get("service_overflow")))


def _ms(text: Any, where: str) -> int:
    """Epoch milliseconds of a window time (``schema.times``)."""
    try:
        return int(times.to_epoch(text) * 1000)
    except (TypeError, ValueError):
        raise ArchiveError(f"{where}: {text!r} is not an RFC 3339 time") from None


def read_chain(directory: Path) -> Chain:
    files = window_files(directory)
    records: list[tuple[str, dict[str, Any] | None]] = []
    for f in files:
        for where, raw in _lines(f):
            rec = None
            if raw is not None:
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    rec = None
            records.append((where, rec if isinstance(rec, dict) else None))
    findings, head, count = verify_chain(records)
    if findings:
        raise ArchiveError(f"archive {directory}: the chain does not verify ({findings[0]}; {len(findings)} "
                           "finding(s)); energy from it could not be checked. Run `carbonspan verify` on it, "
                           "or leave this agent's directory out of --archives")
    windows = sorted((_window(rec, f"{directory.name}/{where}") for where, rec in records if rec is not None),
                     key=lambda w: (w.start, w.end))
    return Chain(directory.name, windows, count, head, [w.start for w in windows])


def read_archives(root: str | Path) -> dict[str, Chain]:
    """Every agent chain under ``root`` (or ``root`` itself when it is one agent's directory)."""
    p = Path(root)
    if not p.is_dir():
        raise ArchiveError(f"--archives {p}: no such directory (the agent's [agent.archive] dir)")
    dirs = agent_directories(p)
    if not dirs:
        raise ArchiveError(f"--archives {p}: no agent directory with windows-*.jsonl files in it")
    return {c.agent: c for c in (read_chain(d) for d in dirs)}


def _overlapping(chain: Chain, start: int, end: int) -> list[Window]:
    i = max(0, bisect_right(chain.starts, start) - 1)
    while i > 0 and chain.windows[i - 1].end > start:  # windows may overlap after a clock step
        i -= 1
    out = []
    for w in chain.windows[i:]:
        if w.start >= end:
            break
        if w.end > start:
            out.append(w)
    return out


def _gaps(windows: list[Window], start: int, end: int) -> list[tuple[int, int]]:
    gaps, reach = [], start
    for w in windows:
        if w.start > reach + GAP_TOLERANCE_MS:
            gaps.append((reach, w.start))
        reach = max(reach, w.end)
    if reach + GAP_TOLERANCE_MS < end:
        gaps.append((reach, end))
    return gaps


def run_energy(chains: dict[str, Chain], service: str, start: int, end: int) -> RunEnergy:
    """The service's energy over [start, end) (UTC epoch ms); see the module docstring."""
    if end <= start:
        return RunEnergy(None, 0, (), "the run has no duration (finished == started)")
    total, used, agents, missing = 0.0, 0, [], []
    overflow = False
    for name, chain in sorted(chains.items()):
        ws = _overlapping(chain, start, end)
        holding = [w for w in ws if service in w.energy]
        if not holding:
            overflow |= any(w.overflow for w in ws)
            continue
        agents.append(name)
        missing += [(name, iso(a), iso(b)) for a, b in _gaps(ws, start, end)]
        for w in ws:
            if w.overflow and service not in w.energy:
                missing.append((name, iso(w.start), iso(w.end)))
                continue
            span = w.end - w.start
            if span <= 0:
                continue
            share = (min(w.end, end) - max(w.start, start)) / span
            total += w.energy.get(service, 0.0) * share
            used += 1
    if not agents:
        why = (f"no archived window holds service {service!r} between {iso(start)} and {iso(end)}"
               + (" (some windows put services past the cap in '(other)')" if overflow else ""))
        return RunEnergy(None, 0, (), why)
    if missing:
        return RunEnergy(None, used, tuple(agents), f"the archives of {', '.join(sorted({m[0] for m in missing}))} "
                         f"do not cover the whole run ({len(missing)} gap(s)); a gap is not counted as zero",
                         tuple(missing))
    return RunEnergy(total, used, tuple(agents), "")


def provenance(chains: dict[str, Chain]) -> dict[str, Any]:
    """What the shadow log records of the archives read: per agent, lines and chain head."""
    return {name: {"lines": c.lines, "head": c.head,
                   "from": iso(c.windows[0].start) if c.windows else None,
                   "to": iso(max(w.end for w in c.windows)) if c.windows else None}
            for name, c in sorted(chains.items())}
