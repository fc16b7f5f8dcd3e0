"""Window lines as the agent writes them, for the aggregate benchmark (issue 18, "bench on real lines").

The aggregate bench used to fold lines of ``aggregator.synth``, whose timestamps have 20
characters (``2026-11-01T00:00:00Z``) where the agent writes 27 (``...:00.000000Z``), which
sends every real line down another path of the fold. Here the window *bodies* are made by
the agent's own code, as its pipeline makes them: OTLP requests from ``bench.workload`` are
decoded (``agent.otlp.decode_protobuf``), scored (``agent.score.score_batch``), merged
(``WindowPartial.merge``) and reported (``agent.window.build_report``); the lines are sealed
as ``agent.archive.Archive.append`` seals them (``schema.chain.seal`` with
``schema.times.format_ns``). A handful of such windows are made once, then replicated with
fresh, contiguous window times and re-sealed into chains ("a recorded run replicated with
fresh timestamps"). ``tests/aggregator/test_bench_lines.py`` holds their shape to the lines a
real agent process writes.

Two shapes: ``services=10`` (each window sees the same ten services) and ``services=1000,
changing=True`` (each window a different draw of about 1,000 services from 1,500, so the
service set changes every window, the case the fold's fast path used to leave).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from agent.carbon.partial import WindowPartial
from agent.config import load_config
from agent.otlp import decode_protobuf
from agent.score import ScoringContext, score_batch
from agent.window import build_report
from bench.workload import SERVICES, make_request
from schema import times
from schema.archive import BODY_KEY, window_file_name
from schema.chain import seal

NS = 1_000_000_000


def _named(request: Any, names: list[str]) -> Any:
    """The request with its resources' ``service.name`` (and ``host.name``) set to ``names``,
    one per resource in order (the workload's five resources keep their regions)."""
    for rs, name in zip(request.resource_spans, names, strict=False):
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                kv.value.string_value = name
            elif kv.key == "host.name":
                kv.value.string_value = f"{name}-7d9f-x2k4"
    return request


def window_bodies(services: int = 10, windows: int = 8, *, changing: bool = False,
                  seed: int = 7, length_s: int = 60) -> list[dict[str, Any]]:
    """``windows`` window bodies the agent's code builds, each from requests covering
    ``services`` services (a fresh draw from 1.5 x as many per window when ``changing``)."""
    ctx = ScoringContext.from_config(load_config(None).green)
    rng = random.Random(seed)
    pool = [f"svc-{i:04d}" for i in range(int(services * 1.5) if changing else services)]
    per_request = len(SERVICES)
    t0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp()) * NS
    bodies = []
    for w in range(windows):
        names = rng.sample(pool, services) if changing else list(pool)
        # one request per window, as a batch span processor of a busy node sends: the
        # workload's resources (five per generated request) renamed to the window's services
        # (twice over for ten services, so each sees spans of several kinds)
        order = names + names if services <= 10 else names
        spans = 512 if services <= 10 else 40
        request = None
        for r in range(0, len(order), per_request):
            part = _named(make_request(n_spans=spans, seed=seed * 100_003 + w * 1_009 + r),
                          order[r:r + per_request])
            if request is None:
                request = part
            else:
                request.resource_spans.extend(part.resource_spans)
        assert request is not None
        partial = WindowPartial.empty().merge(score_batch(decode_protobuf(request.SerializeToString()), ctx))
        start = t0 + w * length_s * NS
        bodies.append(build_report(partial, ctx, start, start + length_s * NS,
                                   agent_id="bench").model_dump(mode="json"))
    return bodies


def replicate(bodies: list[dict[str, Any]], agent: str, count: int, first_ns: int,
              length_s: int = 60) -> Iterator[bytes]:
    """``count`` sealed lines of one agent's chain: the bodies in turn, each given contiguous
    window times from ``first_ns`` in the agent's format and sealed as the agent seals (the
    line's ``ts`` is its window's end plus a few ms, when the agent closes it)."""
    prev, body_of = None, bodies
    for seq in range(count):
        body = body_of[seq % len(body_of)]
        start = first_ns + seq * length_s * NS
        body["agent_id"] = agent
        body["window"]["start"] = times.format_ns(start)
        body["window"]["end"] = times.format_ns(start + length_s * NS)
        rec = seal(prev, seq, times.format_ns(start + length_s * NS + 3_000_000), BODY_KEY, body)
        prev = rec["hash"]
        yield orjson.dumps(rec) + b"\n"


def _agent_rotation() -> tuple[int, bool]:
    """The agent's own rotation defaults (``agent.archive.ArchiveWriter``): bytes per file, by day."""
    import inspect

    from agent.archive import ArchiveWriter

    params = inspect.signature(ArchiveWriter.__init__).parameters
    return int(params["max_size_mb"].default * 1024 * 1024), bool(params["rotate_daily"].default)


def write_archive(root: Path, bodies: list[dict[str, Any]], lines: int, agents: int = 4,
                  files_per_agent: int | None = 25, first: datetime = datetime(2026, 11, 1, tzinfo=UTC)
                  ) -> int:
    """``lines`` lines over ``agents`` chains in the archive layout
    (``<root>/<agent>/windows-<day>-<NNNNNN>.jsonl``); returns the bytes written.

    ``files_per_agent=N``: each chain cut into N files of equal line counts (many small files,
    as an agent that restarts often or rotates small leaves them). ``None``: files as the agent
    rotates them by its defaults (``ArchiveWriter``: a new file per UTC day of the line's ``ts``
    and before a file would pass ``max_size_mb``), named by that day."""
    per_agent = lines // agents
    per_file = max(1, per_agent // files_per_agent) if files_per_agent else 0
    size = 0
    first_ns = int(first.timestamp()) * NS
    for a in range(agents):
        agent = f"agent-{a}"
        directory = root / agent
        directory.mkdir(parents=True)
        size += _write_chain(directory, replicate(bodies, agent, per_agent, first_ns), per_file)
    return size


def _write_chain(directory: Path, lines: Iterator[bytes], per_file: int) -> int:
    """One chain's lines into files of ``per_file`` lines, or (0) by the agent's rotation."""
    max_bytes, daily = _agent_rotation()
    files: list[tuple[str, bytearray]] = []  # (day, lines)
    count = 0
    for line in lines:
        if per_file:
            if not files or count == per_file:
                files.append(("20261101", bytearray()))
                count = 0
        else:  # the agent's rule: rotate by day and by size, before the append
            assert line.startswith(b'{"ts":"'), line[:16]  # seal() puts ts first
            day = line[7:17].replace(b"-", b"").decode()  # {"ts":"YYYY-MM-DD...
            if not files or len(files[-1][1]) + len(line) > max_bytes or (daily and day > files[-1][0]):
                files.append((day, bytearray()))
        files[-1][1].extend(line)
        count += 1
    for n, (day, out) in enumerate(files, 1):
        (directory / window_file_name(day, n)).write_bytes(out)
    return sum(len(out) for _, out in files)
