"""Historic spans -> a chain of window lines of its own: ``carbonspan backfill``.

Last month's traces, exported from Jaeger, Zipkin, Tempo or an OTLP file exporter, can enter a
disclosure: the spans are scored by the same rules and model as the agent's, into windows of
``window_seconds`` by span **start** time (the agent windows by arrival time, which for
historic spans is meaningless), and sealed as a hash chain of their own under
``<archive-dir>/<agent-id>/``, so `aggregate` and `verify` read it like any agent's chain.

What makes a backfilled line different, and says so in every line's ``methodology``:

- ``backfill`` = ``"true"``, ``backfill_sources`` = the SHA-256 of each source file (sorted,
  comma-separated ``sha256:<hex>``), so an auditor can tie a line to the files it came from;
- ``backfill_hosts`` = ``"not charged"``: database and broker hosts draw power all the time,
  and the time a historic period's hosts ran is not known from spans, so ``[[green.hosts]]``
  are left out (never charged for only the windows that happen to hold spans);
- intensity: the hourly profile of the span's month and hour when ``use_hourly_profiles`` is
  on, else the annual value; live signals were not recorded for the past and are not used.

Spans without a usable start time (``timestamp_absurd``) cannot be placed in a window: they are
counted in the result and in the first line's ``counters`` as ``backfill_untimed_spans``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent.archive import ArchiveWriter, window_files
from agent.config import Config
from agent.otlp import concat_batches, read_trace_file
from agent.score import ScoringContext, score_batch
from agent.window import build_report

#: The shortest window a backfill writes: window bounds are written to the microsecond.
MIN_WINDOW_S = 0.001


class BackfillError(RuntimeError):
    """The backfill cannot be written; ``str(exc)`` says why and what to do."""


@dataclass
class BackfillResult:
    directory: Path
    windows: int = 0
    spans: int = 0
    untimed_spans: int = 0
    first_start: str = ""
    last_end: str = ""
    sources: list[str] = field(default_factory=list)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def check_target(archive_root: Path, agent_id: str, window_seconds: float) -> Path:
    """The new chain's directory, or :class:`BackfillError` when the backfill cannot be
    written there; checked before anything is fetched into ``<directory>/sources``, so a
    refused run never overwrites the source files an existing chain's digests name."""
    if not math.isfinite(window_seconds) or window_seconds < MIN_WINDOW_S:
        # nan and inf were a traceback; 1e-12 a window of 0 ns, every span in one 1970 window
        raise BackfillError(f"--window-seconds must be positive, finite and at least "
                            f"{MIN_WINDOW_S:g} s (window times are written to the microsecond), "
                            f"got {window_seconds:g}")
    directory = archive_root / agent_id
    if directory.exists() and window_files(directory):
        raise BackfillError(
            f"{directory} already holds a chain; a backfill is a chain of its own: choose "
            f"another --agent-id (e.g. {agent_id}-backfill) or an empty --archive-dir"
        )
    return directory


def backfill(files: list[Path], cfg: Config, archive_root: Path, agent_id: str,
             window_seconds: float) -> BackfillResult:
    """Score ``files`` into windows and seal them as the new chain ``archive_root/agent_id``."""
    directory = check_target(archive_root, agent_id, window_seconds)
    sources = sorted(file_digest(p) for p in files)
    batch = concat_batches([read_trace_file(p) for p in files])
    green = dataclasses.replace(cfg.green, hosts=())
    base = ScoringContext.from_config(green)
    timed = batch.start_ns > 0
    result = BackfillResult(directory=directory, spans=int(timed.sum()),
                            untimed_spans=int((~timed).sum()), sources=sources)
    window_ns = int(window_seconds * 1e9)
    index = batch.start_ns[timed] // window_ns
    rows_of = np.flatnonzero(timed)
    extra = {"backfill_untimed_spans": result.untimed_spans} if result.untimed_spans else {}
    writer = ArchiveWriter(directory)
    writer.open()
    try:
        for w in np.unique(index).tolist():
            start, end = w * window_ns, (w + 1) * window_ns
            ctx = dataclasses.replace(base, now_ns=end)
            sub = batch.take(rows_of[index == w])
            report = build_report(score_batch(sub, ctx), ctx, start, end, agent_id=agent_id,
                                  counters={**batch.counters, **extra} if not result.windows
                                  else None)
            report.methodology.update({"backfill": "true", "backfill_sources": ",".join(sources),
                                       "backfill_hosts": "not charged"})
            writer.append(report.model_dump(mode="json"))
            result.windows += 1
            result.first_start = result.first_start or report.window.start
            result.last_end = report.window.end
    finally:
        writer.close()
    return result
