"""Engines: fold archive files into one AggregateState, on this machine or on Dask.

The unit of work is one archive file: ``fold_file`` reads it line by line (streaming, memory
bounded by the number of services) into a fresh state. Both engines then merge the per-file
states strictly in file order with :func:`merge_next`. Because the float additions happen in
the same order either way, the local and Dask engines give byte-identical reports.

Caps: a file folded on its own that refused a name at a cap (``overflowed``, e.g. a file
with more than 4096 services) is folded again from a state seeded with the names the merged
files before it hold, so which services, regions and tags are kept or dropped is exactly
what one sequential fold over all the lines gives. That second read is rare (only a file
that overflows by itself) and happens the same way in both engines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import orjson

from aggregator.coverage import GAP_TOLERANCE_S
from aggregator.files import ArchiveFile, ArchiveReadError, iter_line_views
from aggregator.fold.ext import window_end, window_start
from aggregator.fold.fast import BYTE_PATH, finish, fold_line, folder
from aggregator.fold.state import AggregateState, Known, known_names, seeded
from aggregator.fold.sums import FileStat
from aggregator.read import Malformed, Period, load

log = logging.getLogger("carbonspan.aggregate")
_BLANK = frozenset(b" \t\r\n")

#: Per-file states fetched from Dask per round trip (each is small: it grows with services).
GATHER_BATCH = 32
#: The byte path is given up for the rest of a file once it has declined this many lines and
#: more than it has taken (a v1.0 or otherwise unusual archive): each decline is a scan spent
#: before orjson.loads. Counted in ``fast.BYTE_PATH`` ("given_up").
GIVE_UP_AFTER = 32

#: Called after each file with (files done, files total, file): drives progress bars.
Progress = Callable[[int, int, ArchiveFile], None]
#: Folds one loaded line into a state: (state, rec, start, location, strict) -> the line's hash.
LineFold = Callable[[AggregateState, dict, float, str, bool], str]


def fold_lines(lines: Iterable[bytes | memoryview], label: str, agent: str, period: Period,
               strict: bool = False, state: AggregateState | None = None,
               fold: LineFold = fold_line) -> tuple[AggregateState, FileStat]:
    """Fold raw archive lines (``label`` names them in findings) into ``state``.

    Malformed lines are counted with their line number and skipped; nothing in a line can
    raise here except :class:`AttributionError` under ``strict``. Each loaded line is folded
    by ``fold``: ``aggregator.fold.fast.fold_line``, the C accelerator in front of the
    reference fold where it is built, which first tries the common line straight from its
    bytes (the C Folder's ``take``, as ``fast.fold_raw``: no ``orjson.loads`` at all); the accelerator tests pass the
    reference itself, ``aggregator.fold.reference.fold_line``, and compare.
    """
    state = AggregateState() if state is None else state
    state.set_grid(period)  # the time buckets of aggregate.series (aggregator.series)
    stat = FileStat(agent, label.rsplit("/", 1)[-1])
    one_sided_before = state.one_sided_windows  # this file's count: inputs.files[].one_sided_windows
    lo, hi = period.start, period.end
    tally, loads, start_of, end_of = state.tally, orjson.loads, window_start, window_end
    chain: list | None = None  # this agent's [first, last, windows], once a window is in period
    in_period = 0
    lineno = 0
    first_hash: str | None = None  # the hashes of the file's first and last objects: its identity
    last_hash = ""
    # the byte path is the accelerated fold's: a C Folder, holding the state's totals from a
    # line it takes to the next sync (before any line the long way, and at the end)
    byte_folder = folder(state) if fold is fold_line else None
    take = byte_folder.take if byte_folder is not None else None  # type: ignore[attr-defined]
    run_lo = run_hi = 0.0  # the run of windows being extended (temporal coverage), if any
    in_run = False
    try:
        for lineno, raw in enumerate(lines, start=1):  # noqa: B007 - used after the loop
            if len(raw) < 2 or raw[0] in _BLANK and not bytes(raw).strip():
                continue
            # the common line, folded straight from its bytes (start, end, hash, extra), or None
            got = take(raw, lo, hi) if take is not None else None
            if got is not None:
                start, end, line_hash, extra = got
                if extra is not None:
                    finish(state, byte_folder, extra)
                last_hash = line_hash
                if first_hash is None:
                    first_hash = line_hash
            else:
                if byte_folder is not None:
                    byte_folder.sync()  # type: ignore[attr-defined]
                    if take is not None and byte_folder.declined >= GIVE_UP_AFTER \
                            and byte_folder.declined > byte_folder.folded:  # type: ignore[attr-defined]
                        take = None
                        BYTE_PATH["given_up"] += 1
                        log.debug("%s: byte path given up after %d declined lines (%d taken)", label,
                                  byte_folder.declined, byte_folder.folded)  # type: ignore[attr-defined]
                try:
                    try:
                        rec, fixed = loads(raw), 0
                    except orjson.JSONDecodeError:  # tolerant: NaN/Infinity/1e400 -> 0, counted
                        rec, fixed = load(raw)  # raises Malformed saying why
                    if type(rec) is not dict:
                        raise Malformed("not a JSON object")
                    last_hash = _line_hash(rec)
                    if first_hash is None:
                        first_hash = last_hash
                    start = start_of(rec)
                    if not lo <= start < hi:
                        state.windows_outside += 1
                        continue
                    # the location is only needed to name a window that fails strict attribution
                    line_hash = fold(state, rec, start, f"{label}:{lineno}" if strict else label, strict)
                except Malformed as exc:
                    state.note_malformed(f"{label}:{lineno}", str(exc))
                    stat.malformed_lines += 1
                    continue
                if fixed:
                    tally.sanitised += fixed
                end = end_of(rec)
            in_period += 1
            if end is None or not end >= start:
                state.windows_without_end += 1
            elif in_run and run_lo <= start <= run_hi + GAP_TOLERANCE_S:  # the usual case: next window
                if end > run_hi:
                    run_hi = end
            else:
                if in_run:
                    state.add_run(agent, run_lo, run_hi)
                run_lo, run_hi, in_run = start, end, True
            if chain is None:
                chain = state.chains.get(agent) or state.chains.setdefault(agent, ["", "", 0])
            if line_hash:
                chain[0] = chain[0] or line_hash
                chain[1] = line_hash
            chain[2] += 1
    except ArchiveReadError as exc:
        state.note_malformed(f"{label}:{lineno + 1}", str(exc))
        stat.malformed_lines += 1
    finally:
        if byte_folder is not None:
            byte_folder.sync()  # type: ignore[attr-defined]
    if in_run:
        state.add_run(agent, run_lo, run_hi)
    if byte_folder is not None:
        BYTE_PATH["folded"] += byte_folder.folded  # type: ignore[attr-defined]
        BYTE_PATH["declined"] += byte_folder.declined  # type: ignore[attr-defined]
    stat.windows_in_period = in_period
    stat.one_sided_windows = state.one_sided_windows - one_sided_before
    stat.first_hash, stat.last_hash = first_hash or "", last_hash
    stat.lines = lineno
    state.lines += lineno
    return state, stat


def _line_hash(rec: dict) -> str:
    value = rec.get("hash")
    return value if type(value) is str and len(value) <= 128 else ""


def fold_file(f: ArchiveFile, period: Period, strict: bool = False, known: Known | None = None) -> AggregateState:
    """Fold every window of ``f`` inside ``period`` into a new state (streaming), seeded with
    ``known`` when the file is folded again after overflowing a cap (see :func:`merge_next`).

    A truncated gzip stream keeps the lines before the break. A file that used the fallback
    (I/O proxy) path is listed in ``fallback_files`` so operators can find old archives.
    """
    start = AggregateState() if known is None else seeded(known)
    state, stat = fold_lines(iter_line_views(f), f.label, f.agent, period, strict, start)
    state.drop_caches()
    state.files.append(stat)
    if state.fallback_windows:
        state.fallback_files.append(f.label)
    return state


def _announce(f: ArchiveFile, state: AggregateState) -> None:
    """One warning per archive file that used the fallback, and one per file with one-sided
    windows, logged where the run is driven."""
    if state.fallback_windows:
        log.warning(
            "%s: %d window(s) without runtime attribution used the I/O-proxy fallback; "
            "upgrade the agent that wrote it for per-service energy",
            f.label, state.fallback_windows,
        )
    if state.one_sided_windows:
        log.warning(
            "%s: %d window(s) had only one of per_service_energy_kwh / per_service_carbon_kgco2eq "
            "non-empty; they were folded by the I/O-proxy path from the line's totals "
            "(aggregate.one_sided_windows) so neither total is lost; check the agent that wrote it",
            f.label, state.one_sided_windows,
        )


def merge_next(total: AggregateState, state: AggregateState,
               refold: Callable[[Known], AggregateState]) -> AggregateState:
    """Merge the next partition's ``state`` after ``total`` (in place; returns ``total``).

    When the partition refused a name at a cap on its own and ``total`` already holds names,
    the partition is folded again by ``refold(known_names(total))`` - seeded with those names -
    so the caps give what one sequential fold gives; otherwise the ordered merge already does.
    """
    if state.overflowed and (total.services or total.regions or total.models or total.methodology
                             or total.host_regions):
        state = refold(known_names(total))
    return total.merge(state)


def run_local(files: Sequence[ArchiveFile], period: Period, strict: bool = False,
              progress: Progress | None = None) -> AggregateState:
    """Fold ``files`` one after another in this process."""
    total = AggregateState()
    for i, f in enumerate(files, start=1):
        state = fold_file(f, period, strict)
        _announce(f, state)
        merge_next(total, state, lambda known, f=f: fold_file(f, period, strict, known))
        if progress is not None:
            progress(i, len(files), f)
    return total


def run_dask(files: Sequence[ArchiveFile], period: Period, strict: bool = False,
             progress: Progress | None = None, scheduler: str | None = None,
             client: object | None = None) -> AggregateState:
    """Fold each file on a Dask worker; merge the states here, in file order.

    Give ``client`` (a ``distributed.Client``) or ``scheduler`` (``tcp://host:8786``); with
    neither a two-worker LocalCluster on 127.0.0.1 is started for the run. Workers must see
    the same paths (shared file system or an fsspec URL such as s3://).
    """
    import dask
    from distributed import Client, LocalCluster

    own_cluster = own_client = None
    if client is None:
        if scheduler is None:
            # the scheduler's HTTP server listens even without a dashboard, on 8787 unless
            # told otherwise: port 0 on loopback, so two runs on one machine never contend
            own_cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0")
            scheduler = own_cluster.scheduler_address
        # dask's connect timeout (30 s unless configured, e.g. DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT)
        client = own_client = Client(scheduler, timeout=dask.config.get("distributed.comm.timeouts.connect"))
    try:
        futures = client.map(fold_file, list(files), period=period, strict=strict, pure=False)  # type: ignore[attr-defined]
        total = AggregateState()
        # gather in file order, a batch at a time: one round trip per batch, bounded memory
        for lo in range(0, len(futures), GATHER_BATCH):
            batch = futures[lo : lo + GATHER_BATCH]
            for i, state in enumerate(client.gather(batch), start=lo):  # type: ignore[attr-defined]
                _announce(files[i], state)
                merge_next(total, state, lambda known, f=files[i]: client.submit(  # type: ignore[attr-defined]
                    fold_file, f, period, strict, known, pure=False).result())
                if progress is not None:
                    progress(i + 1, len(files), files[i])
            client.cancel(batch)  # type: ignore[attr-defined]  # release the workers' copies
        return total
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()
