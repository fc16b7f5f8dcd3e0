"""WindowPartial: what one window needs to remember, mergeable in order and serialisable.

The state is a sparse list of (service, region) cells — only pairs that occurred, sorted by
(service, region) — with both axes in first-seen order, plus per-region facts, per-service
requests, per-(service, endpoint) I/O counts, the window's distinct 64-bit trace ids and its
count of root spans (spans without a parent: requests that began in this window, here).
Memory is O(cells + endpoints + traces), never O(spans) and never services x regions.

Caps are applied when a partial is merged into a window: services beyond ``MAX_SERVICES``
fold into the service ``(other)`` (their energy, carbon, ops and requests kept there; counted
per span), regions beyond ``MAX_REGIONS`` into ``unknown`` (0 g, counted per span) and
(service, endpoint) keys beyond ``MAX_ENDPOINTS`` into ``(service, "(other)")`` (counted per op). ``score_batch`` returns an
uncapped partial (its size is bounded by the batch), so folding a window batch by batch,
``empty().merge(p1).merge(p2)...``, equals ``empty().merge(score(whole))``: the law the
property tests check. Below the caps merging is also associative.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np
import orjson

from agent.carbon import ext as _ext
from agent.carbon.ext import fallback
from agent.carbon.tagcodes import CODE, TAGS, TO_UNKNOWN

#: names in a window's per-service maps, "(other)" included (the aggregator's cap): past
#: MAX_SERVICES - 1 named services, new ones fold into "(other)"
MAX_SERVICES = 4096
MAX_REGIONS = 256  # distinct real regions per window; later ones are scored as "unknown"
MAX_ENDPOINTS = 4096  # (service, endpoint) keys per window; new ones then -> (service, "(other)")
UNKNOWN = "unknown"
OTHER_ENDPOINT = "(other)"
OTHER_SERVICE = "(other)"  # the service that holds the services past MAX_SERVICES
_SUMS = ("energy", "carbon", "ops", "measured_ops", "span_count")  # per-cell sums
_MAXES = ("etag", "ltag")  # per-cell highest tag codes
_CELL_ARRAYS = ("cell_svc", "cell_reg", *_SUMS, *_MAXES)
_DTYPES = {"energy": np.float64, "carbon": np.float64, "etag": np.int8, "ltag": np.int8}


def cell_columns(*buffers: object) -> dict[str, np.ndarray]:
    """The cell arrays over the C pass's buffers (one per ``_CELL_ARRAYS`` name, in that
    order), each read in its dtype without a copy: what ``agent._score`` hands back."""
    return {name: np.frombuffer(buf, _DTYPES.get(name, np.int64))  # type: ignore[call-overload]
            for name, buf in zip(_CELL_ARRAYS, buffers, strict=True)}


def _c_module():  # noqa: ANN202 - agent._score, or None (not built, or a stale build)
    return _ext.EXT


def distinct(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)`` (sorted, each value once) by a sort: numpy 2's hash-based unique
    took 0.9 s for the 2 M trace ids of a busy window (cache misses), a sort takes ~20 ms."""
    out = np.sort(ids)
    if out.size > 1:
        keep = np.empty(out.size, np.bool_)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        out = out[keep]
    return out


def bump(counters: dict[str, int], key: str, n: int = 1) -> None:
    if n:
        counters[key] = counters.get(key, 0) + n


@dataclass(eq=False)
class WindowPartial:
    services: list[str]  # lowercased service keys, first-seen order
    service_region: list[int]  # region index of each service's first span
    regions: list[str]  # lowercased, first-seen order ("unknown" included where first seen)
    region_kind: np.ndarray  # (R,) int8 highest KIND_* used in the region
    region_estimated: np.ndarray  # (R,) bool: a live value was stale, or marked estimated
    cell_svc: np.ndarray  # (C,) int64 service index of each cell
    cell_reg: np.ndarray  # (C,) int64 region index of each cell
    energy: np.ndarray  # (C,) kWh
    carbon: np.ndarray  # (C,) gCO2e
    ops: np.ndarray  # (C,) I/O operations
    measured_ops: np.ndarray  # (C,) I/O operations whose energy came from a source
    span_count: np.ndarray  # (C,) spans
    etag: np.ndarray  # (C,) int8 highest energy-tag code (measured or io_proxy_v*)
    ltag: np.ndarray  # (C,) int8 highest live-intensity tag code
    requests: np.ndarray  # (S,) entry spans
    endpoints: dict[tuple[str, str], int] = field(default_factory=dict)
    # sorted unique trace ids folded so far; read them with trace_ids(), which folds pending
    traces: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    spans: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    root_spans: int = 0  # spans without a parent span id
    #: trace-id chunks not yet folded into ``traces`` (merges defer the sort: amortised O(n log n))
    pending_traces: list[np.ndarray] = field(default_factory=list, repr=False)

    def trace_ids(self) -> np.ndarray:
        """The window's distinct trace ids, sorted (folds pending chunks in)."""
        if self.pending_traces:
            self.traces = distinct(np.concatenate([self.traces, *self.pending_traces]))
            self.pending_traces = []
        return self.traces

    @classmethod
    def empty(cls, counters: dict[str, int] | None = None) -> WindowPartial:
        cells = {k: np.zeros(0, _DTYPES.get(k, np.int64)) for k in _CELL_ARRAYS}
        return cls(
            services=[],
            service_region=[],
            regions=[],
            region_kind=np.zeros(0, np.int8),
            region_estimated=np.zeros(0, np.bool_),
            requests=np.zeros(0, np.int64),
            counters=dict(counters or {}),
            **cells,
        )

    @property
    def io_ops(self) -> int:
        return int(self.ops.sum())

    def ops_by_service(self) -> dict[str, int]:
        """I/O operations per service key (what measured-energy sources divide by)."""
        per = np.bincount(self.cell_svc, weights=self.ops, minlength=len(self.services))
        return {svc: int(n) for svc, n in zip(self.services, per, strict=True) if n}

    @staticmethod
    def add_endpoint(
        out: dict[tuple[str, str], int], key: tuple[str, str], n: int, counters: dict
    ) -> None:
        """Add ``n`` ops to an endpoint, folding new ones past MAX_ENDPOINTS into "(other)"."""
        if key not in out and key[1] != OTHER_ENDPOINT and len(out) >= MAX_ENDPOINTS:
            bump(counters, "endpoint_overflow", n)
            key = (key[0], OTHER_ENDPOINT)
        out[key] = out.get(key, 0) + n

    # ------------------------------------------------------------------ merge
    def merge(self, other: WindowPartial) -> WindowPartial:
        """This window's facts followed by ``other``'s (left's first-seen facts win)."""
        counters = dict(self.counters)
        for k, v in other.counters.items():
            bump(counters, k, v)
        services, s_map, renamed = self._merge_services(other)
        if renamed:  # counted per span, so the count is the same however a window is batched
            moved = np.isin(other.cell_svc, np.fromiter(renamed, np.int64, len(renamed)))
            bump(counters, "service_overflow", int(other.span_count[moved].sum()))
        regions, r_map, folded = self._merge_regions(other)
        theirs = {k: getattr(other, k) for k in _CELL_ARRAYS}
        folded_cells = folded[other.cell_reg]
        if folded_cells.any():  # spans of a folded region score as "unknown": 0 g, annual proxy
            bump(counters, "region_overflow", int(other.span_count[folded_cells].sum()))
            theirs["carbon"] = np.where(folded_cells, 0.0, other.carbon)
            theirs["etag"] = np.where(folded_cells, TO_UNKNOWN[other.etag], other.etag)
            theirs["ltag"] = np.where(folded_cells, 0, other.ltag).astype(np.int8)
        theirs["cell_svc"] = s_map[other.cell_svc]
        theirs["cell_reg"] = r_map[other.cell_reg]
        cells = _combine_cells({k: getattr(self, k) for k in _CELL_ARRAYS}, theirs, len(regions))
        kept = ~folded
        kind = _padded(self.region_kind, len(regions))
        np.maximum.at(kind, r_map[kept], other.region_kind[kept])
        est = _padded(self.region_estimated, len(regions))
        est[r_map[kept & other.region_estimated]] = True
        requests = _padded(self.requests, len(services))
        np.add.at(requests, s_map, other.requests)  # folded services share the "(other)" row
        service_region = list(self.service_region)
        for i, row in enumerate(s_map.tolist()):  # a new row takes its first service's region
            if row == len(service_region):
                service_region.append(int(r_map[other.service_region[i]]))
        traces, pending = self.traces, [*self.pending_traces, other.traces, *other.pending_traces]
        if sum(c.size for c in pending) > max(traces.size, 4096):
            traces, pending = distinct(np.concatenate([traces, *pending])), []
        return WindowPartial(
            services=services,
            service_region=service_region,
            regions=regions,
            region_kind=kind,
            region_estimated=est,
            requests=requests,
            endpoints=self._merge_endpoints(other, counters, renamed),
            traces=traces.astype(np.uint64, copy=False),
            spans=self.spans + other.spans,
            counters=counters,
            root_spans=self.root_spans + other.root_spans,
            pending_traces=pending,
            **cells,
        )

    def _merge_services(
        self, other: WindowPartial
    ) -> tuple[list[str], np.ndarray, dict[int, str]]:
        """Merged service list, other's index -> merged index, and other's services folded
        into ``(other)`` (index -> name) because the window already holds MAX_SERVICES - 1."""
        index = {k: i for i, k in enumerate(self.services)}
        real = len(index) - (OTHER_SERVICE in index)
        s_map = np.zeros(len(other.services), dtype=np.int64)
        renamed: dict[int, str] = {}
        for j, name in enumerate(other.services):
            if name not in index:
                if name != OTHER_SERVICE and real >= MAX_SERVICES - 1:
                    renamed[j] = name
                    name = OTHER_SERVICE
                if name not in index:
                    index[name] = len(index)
                    real += name != OTHER_SERVICE
            s_map[j] = index[name]
        return list(index), s_map, renamed

    def _merge_regions(self, other: WindowPartial) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Merged region list, other's index -> merged index, and other's folded regions."""
        regions = list(self.regions)
        index = {r: i for i, r in enumerate(regions)}
        real = sum(1 for r in regions if r != UNKNOWN)
        r_map = np.zeros(len(other.regions), dtype=np.int64)
        folded = np.zeros(len(other.regions), dtype=np.bool_)
        for j, name in enumerate(other.regions):
            if name not in index:
                if name != UNKNOWN and real >= MAX_REGIONS:
                    folded[j] = True
                    name = UNKNOWN
                if name not in index:
                    index[name] = len(regions)
                    regions.append(name)
                    real += name != UNKNOWN
            r_map[j] = index[name]
        return regions, r_map, folded

    def _merge_endpoints(
        self, other: WindowPartial, counters: dict, renamed: dict[int, str]
    ) -> dict[tuple[str, str], int]:
        endpoints = dict(self.endpoints)
        theirs = other.endpoints.items()
        if renamed:  # endpoints of services folded into "(other)" go with them
            folded = set(renamed.values())
            theirs = [((OTHER_SERVICE if s in folded else s, e), n) for (s, e), n in theirs]
        if len(endpoints) + len(other.endpoints) <= MAX_ENDPOINTS:  # no cap can apply
            for key, n in theirs:
                endpoints[key] = endpoints.get(key, 0) + n
        else:
            for key, n in theirs:
                WindowPartial.add_endpoint(endpoints, key, n, counters)
        return endpoints

    # ------------------------------------------------------------------ serialisation
    def to_bytes(self) -> bytes:
        """orjson bytes for the write-ahead log; ``from_bytes`` restores it exactly.

        Tags are written as names, not codes, so a change of precedence cannot reinterpret
        an old log; trace ids as base64 of little-endian u64. Written by ``agent._score`` in C
        when it is built (~500 services, cells and endpoints of a batch at 10,000 services are
        ~2,000 list items to build in Python before orjson sees them): the same bytes as
        :meth:`to_bytes_reference`, which it falls back to for anything it does not write
        (tests/scoring/test_invariants.py holds the two equal).
        """
        c = _c_module()
        if c is not None:
            arr = np.ascontiguousarray
            i64, i8 = np.int64, np.int8
            out = c.partial_bytes(
                (self.services, self.service_region, self.regions),
                (arr(self.region_kind, i8), arr(self.region_estimated, np.bool_),
                 arr(self.requests, i64), arr(self.trace_ids(), "<u8"),
                 arr(self.cell_svc, i64), arr(self.cell_reg, i64),
                 orjson.dumps(arr(self.energy, np.float64), option=orjson.OPT_SERIALIZE_NUMPY),
                 orjson.dumps(arr(self.carbon, np.float64), option=orjson.OPT_SERIALIZE_NUMPY),
                 arr(self.ops, i64), arr(self.measured_ops, i64),
                 arr(self.span_count, i64), arr(self.etag, i8), arr(self.ltag, i8)),
                self.endpoints if type(self.endpoints) is dict else dict(self.endpoints),
                self.spans, self.counters, self.root_spans, TAGS,
            )  # fmt: skip
            if out is not None:
                return out
        return self.to_bytes_reference()

    def to_bytes_reference(self) -> bytes:
        """The WAL record's bytes as orjson writes its document: what :meth:`to_bytes` equals."""
        doc: dict = {
            "v": 2,
            "services": self.services,
            "service_region": self.service_region,
            "regions": self.regions,
            "region_kind": self.region_kind.tolist(),
            "region_estimated": self.region_estimated.tolist(),
            "requests": self.requests.tolist(),
            "endpoints": [[s, e, n] for (s, e), n in self.endpoints.items()],
            "traces": base64.b64encode(self.trace_ids().astype("<u8").tobytes()).decode(),
            "spans": self.spans,
            "counters": self.counters,
            "root_spans": self.root_spans,
        }
        for name in _CELL_ARRAYS:
            values = getattr(self, name).tolist()
            doc[name] = [TAGS[c] for c in values] if name in _MAXES else values
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> WindowPartial:
        doc = orjson.loads(data)
        if doc.get("v") != 2:
            raise ValueError(
                f"window partial version {doc.get('v')!r} is not supported; expected 2"
            )
        cells = {}
        for name in _CELL_ARRAYS:
            values = [CODE[t] for t in doc[name]] if name in _MAXES else doc[name]
            cells[name] = np.array(values, dtype=_DTYPES.get(name, np.int64))
        return cls(
            services=doc["services"],
            service_region=doc["service_region"],
            regions=doc["regions"],
            region_kind=np.array(doc["region_kind"], dtype=np.int8),
            region_estimated=np.array(doc["region_estimated"], dtype=np.bool_),
            requests=np.array(doc["requests"], dtype=np.int64),
            endpoints={(s_, e): n for s_, e, n in doc["endpoints"]},
            traces=np.frombuffer(base64.b64decode(doc["traces"]), dtype="<u8").astype(np.uint64),
            spans=doc["spans"],
            counters=doc["counters"],
            root_spans=doc.get("root_spans", 0),  # a log written before root spans were counted
            **cells,
        )

    def same_as(self, other: WindowPartial, rel: float = 0.0) -> bool:
        """Equality of every field; floats within ``rel`` (0: bit-identical)."""
        plain = (
            "services", "service_region", "regions", "endpoints", "spans", "counters", "root_spans",
        )  # fmt: skip
        if any(getattr(self, k) != getattr(other, k) for k in plain):
            return False
        exact = (
            "region_kind",
            "region_estimated",
            "requests",
            *_CELL_ARRAYS[:2],
            *_SUMS[2:],
            *_MAXES,
        )
        if any(not np.array_equal(getattr(self, k), getattr(other, k)) for k in exact):
            return False
        if not np.array_equal(self.trace_ids(), other.trace_ids()):
            return False
        return all(
            getattr(self, k).shape == getattr(other, k).shape
            and np.allclose(getattr(self, k), getattr(other, k), rtol=rel, atol=0.0)
            for k in ("energy", "carbon")
        )


def _padded(a: np.ndarray, n: int) -> np.ndarray:
    """A copy of ``a`` zero-padded to length ``n``."""
    out = np.zeros(n, dtype=a.dtype)
    out[: a.size] = a
    return out


def _combine_cells(mine: dict, theirs: dict, n_regions: int) -> dict[str, np.ndarray]:
    """Cells of both sides, same (service, region) summed / maxed, sorted by (service, region)."""
    code = np.concatenate([mine["cell_svc"], theirs["cell_svc"]]) * n_regions + np.concatenate(
        [mine["cell_reg"], theirs["cell_reg"]]
    )
    uniq, inv = np.unique(code, return_inverse=True)
    out = {"cell_svc": uniq // n_regions, "cell_reg": uniq % n_regions}
    for name in _SUMS:
        values = np.concatenate([mine[name], theirs[name]])
        out[name] = np.bincount(inv, values, minlength=uniq.size).astype(values.dtype)
    for name in _MAXES:
        codes = np.zeros(uniq.size, dtype=np.int8)
        np.maximum.at(codes, inv, np.concatenate([mine[name], theirs[name]]))
        out[name] = codes
    return out


class WindowAccumulator:
    """An open window's partial, merged into in place: ``add(p)`` costs O(p), not O(window).

    ``WindowPartial.merge`` rebuilds the service and region indexes, copies the endpoint map
    and re-sorts every cell on each merge, so merging a batch into a window of 10,000 services
    cost ~1 ms under the pipeline lock. This keeps the indexes, the per-cell sums and the
    endpoint map across merges, in C (``agent._score.Accumulator``: a 512-span batch of ~500
    services is ~1,500 entries, each a few Python-level steps in ``WindowAccumulatorReference``)
    and applies each merge's rules in the same order, with the same float additions in the same
    order, so ``snapshot()`` is ``same_as`` (bit-identical) the fold
    ``start.merge(p1).merge(p2)...``: tests/scoring/test_invariants.py holds it, and the
    reference, to that. Counters and trace ids are kept here (a few keys; numpy). Without the
    C extension (or with a stale build) the reference does the work, and it does the rest of a
    window whose counts could pass int64 (the C sums are int64, the reference's endpoint counts
    unbounded Python ints): ``add`` hands it over, counted as the fallback ``count_overflow``.
    """

    def __init__(self, start: WindowPartial | None = None) -> None:
        c = _c_module()
        self._c = None if c is None else c.Accumulator()
        self._ref = WindowAccumulatorReference() if c is None else None
        self._traces = np.zeros(0, np.uint64)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0  # trace ids in _pending
        self.spans = 0
        self.counters: dict[str, int] = {}
        self.root_spans = 0
        if start is not None:
            self.add(start)

    @property
    def services(self) -> list[str]:
        return self._ref.services if self._c is None else self._c.services

    @property
    def regions(self) -> list[str]:
        return self._ref.regions if self._c is None else self._c.regions

    @property
    def endpoints(self) -> dict[tuple[str, str], int]:
        return self._ref.endpoints if self._c is None else self._c.endpoints

    def add(self, other: WindowPartial) -> None:
        """Merge ``other`` in, as ``WindowPartial.merge`` would (left's first-seen facts win)."""
        if self._c is None:
            self._ref.add(other)
            self.counters, self.spans, self.root_spans = (
                self._ref.counters, self._ref.spans, self._ref.root_spans)
            return
        arr = np.ascontiguousarray
        i64, i8 = np.int64, np.int8
        services, regions, endpoints = other.services, other.regions, other.endpoints
        service_region = other.service_region
        res = self._c.add(
            services if type(services) is list else list(services),
            service_region if type(service_region) is list else list(service_region),
            regions if type(regions) is list else list(regions),
            endpoints if type(endpoints) is dict else dict(endpoints),
            (arr(other.region_kind, i8), arr(other.region_estimated, np.bool_),
             arr(other.cell_svc, i64), arr(other.cell_reg, i64),
             arr(other.energy, np.float64), arr(other.carbon, np.float64),
             arr(other.ops, i64), arr(other.measured_ops, i64), arr(other.span_count, i64),
             arr(other.etag, i8), arr(other.ltag, i8), arr(other.requests, i64), TO_UNKNOWN),
            (MAX_SERVICES, MAX_REGIONS, MAX_ENDPOINTS),
            (OTHER_SERVICE, UNKNOWN, OTHER_ENDPOINT),
        )  # fmt: skip
        if res is None:  # a count's sum could pass int64: the reference's ints are unbounded
            self._to_reference(other)
            return
        moved, folded, over = res
        counters = self.counters  # after add(), which changes nothing when it refuses a partial
        for k, v in other.counters.items():
            bump(counters, k, v)
        bump(counters, "service_overflow", moved)  # in merge's order of first mention
        bump(counters, "region_overflow", folded)
        bump(counters, "endpoint_overflow", over)
        self._pending += [other.traces, *other.pending_traces]
        self._pending_n += other.traces.size + sum(c.size for c in other.pending_traces)
        if self._pending_n > max(self._traces.size, 4096):
            self._traces = distinct(np.concatenate([self._traces, *self._pending]))
            self._pending, self._pending_n = [], 0
        self.spans += other.spans
        self.root_spans += other.root_spans

    def _to_reference(self, other: WindowPartial) -> None:
        """The C accumulator declined ``other`` (nothing of it added): its window so far goes to
        the reference (an empty one plus the snapshot is the same window: every name, cell and
        endpoint key below its cap, in the same order, each float added once to 0.0), which
        then takes ``other`` and every later add of this window. Counted and logged
        (``count_overflow``)."""
        fallback("count_overflow", f"a batch of {other.spans} spans would take a count of a "
                 f"window of {self.spans} spans past int64; the window goes on in the reference")
        ref = WindowAccumulatorReference(self.snapshot())
        self._c, self._ref = None, ref
        self.add(other)

    def snapshot(self) -> WindowPartial:
        """The window so far as a ``WindowPartial`` (cells sorted by (service, region)); O(window),
        for a report. Later ``add`` calls do not change it."""
        if self._c is None:
            return self._ref.snapshot()
        (services, service_region, regions, kind, est, requests, cell_svc, cell_reg, energy,
         carbon, ops, measured, span_count, etag, ltag, endpoints) = self._c.snapshot()
        return WindowPartial(
            services=services,
            service_region=service_region,
            regions=regions,
            region_kind=np.frombuffer(kind, np.int8),
            region_estimated=np.frombuffer(est, np.bool_),
            **cell_columns(cell_svc, cell_reg, energy, carbon, ops, measured, span_count, etag, ltag),
            requests=np.frombuffer(requests, np.int64),
            endpoints=endpoints,
            traces=self._traces,
            spans=self.spans,
            counters=dict(self.counters),
            root_spans=self.root_spans,
            pending_traces=list(self._pending),
        )


class WindowAccumulatorReference:
    """``WindowAccumulator`` in Python and numpy: its specification (and its stand-in when the
    C extension is not built). Same rules, same order, same float additions in the same order
    as ``WindowPartial.merge``.
    """

    def __init__(self, start: WindowPartial | None = None) -> None:
        self.services: list[str] = []
        self._svc: dict[str, int] = {}
        self._real_svc = 0
        self.service_region: list[int] = []
        self.regions: list[str] = []
        self._reg: dict[str, int] = {}
        self._real_reg = 0
        self._kind = np.zeros(16, np.int8)
        self._est = np.zeros(16, np.bool_)
        self._requests = np.zeros(64, np.int64)
        self._cell: dict[tuple[int, int], int] = {}
        self._n = 0  # cells in use
        self._arrays = {k: np.zeros(64, _DTYPES.get(k, np.int64)) for k in (*_SUMS, *_MAXES)}
        self._cell_svc = np.zeros(64, np.int64)
        self._cell_reg = np.zeros(64, np.int64)
        self.endpoints: dict[tuple[str, str], int] = {}
        self._traces = np.zeros(0, np.uint64)
        self._pending: list[np.ndarray] = []
        self.spans = 0
        self.counters: dict[str, int] = {}
        self.root_spans = 0
        if start is not None:
            self.add(start)

    @staticmethod
    def _grow(a: np.ndarray, n: int) -> np.ndarray:
        if n <= a.size:
            return a
        out = np.zeros(max(n, 2 * a.size), dtype=a.dtype)
        out[: a.size] = a
        return out

    def add(self, other: WindowPartial) -> None:
        """Merge ``other`` in, as ``WindowPartial.merge`` would (left's first-seen facts win)."""
        counters = self.counters
        for k, v in other.counters.items():
            bump(counters, k, v)
        s_map, renamed = self._add_services(other)
        if renamed:
            moved = np.isin(other.cell_svc, np.fromiter(renamed, np.int64, len(renamed)))
            bump(counters, "service_overflow", int(other.span_count[moved].sum()))
        r_map, folded = self._add_regions(other)
        theirs = {k: getattr(other, k) for k in (*_SUMS, *_MAXES)}
        folded_cells = folded[other.cell_reg]
        if folded_cells.any():
            bump(counters, "region_overflow", int(other.span_count[folded_cells].sum()))
            theirs["carbon"] = np.where(folded_cells, 0.0, other.carbon)
            theirs["etag"] = np.where(folded_cells, TO_UNKNOWN[other.etag], other.etag)
            theirs["ltag"] = np.where(folded_cells, 0, other.ltag).astype(np.int8)
        self._add_cells(s_map[other.cell_svc].tolist(), r_map[other.cell_reg].tolist(), theirs)
        kept = ~folded
        n_reg = len(self.regions)
        self._kind = self._grow(self._kind, n_reg)
        self._est = self._grow(self._est, n_reg)
        np.maximum.at(self._kind, r_map[kept], other.region_kind[kept])
        self._est[r_map[kept & other.region_estimated]] = True
        self._requests = self._grow(self._requests, len(self.services))
        np.add.at(self._requests, s_map, other.requests)
        for i, row in enumerate(s_map.tolist()):
            if row == len(self.service_region):
                self.service_region.append(int(r_map[other.service_region[i]]))
        self._add_endpoints(other, counters, renamed)
        self._pending += [other.traces, *other.pending_traces]
        if sum(c.size for c in self._pending) > max(self._traces.size, 4096):
            self._traces = distinct(np.concatenate([self._traces, *self._pending]))
            self._pending = []
        self.spans += other.spans
        self.root_spans += other.root_spans

    def _add_services(self, other: WindowPartial) -> tuple[np.ndarray, dict[int, str]]:
        index = self._svc
        s_map = np.zeros(len(other.services), dtype=np.int64)
        renamed: dict[int, str] = {}
        for j, name in enumerate(other.services):
            if name not in index:
                if name != OTHER_SERVICE and self._real_svc >= MAX_SERVICES - 1:
                    renamed[j] = name
                    name = OTHER_SERVICE
                if name not in index:
                    index[name] = len(self.services)
                    self.services.append(name)
                    self._real_svc += name != OTHER_SERVICE
            s_map[j] = index[name]
        return s_map, renamed

    def _add_regions(self, other: WindowPartial) -> tuple[np.ndarray, np.ndarray]:
        index = self._reg
        r_map = np.zeros(len(other.regions), dtype=np.int64)
        folded = np.zeros(len(other.regions), dtype=np.bool_)
        for j, name in enumerate(other.regions):
            if name not in index:
                if name != UNKNOWN and self._real_reg >= MAX_REGIONS:
                    folded[j] = True
                    name = UNKNOWN
                if name not in index:
                    index[name] = len(self.regions)
                    self.regions.append(name)
                    self._real_reg += name != UNKNOWN
            r_map[j] = index[name]
        return r_map, folded

    def _add_cells(self, svc: list[int], reg: list[int], theirs: dict[str, np.ndarray]) -> None:
        cell = self._cell
        rows = np.empty(len(svc), dtype=np.int64)
        for i, key in enumerate(zip(svc, reg, strict=True)):
            at = cell.get(key)
            if at is None:
                at = cell[key] = self._n
                self._n += 1
            rows[i] = at
        n = self._n
        if n > self._cell_svc.size:
            self._cell_svc = self._grow(self._cell_svc, n)
            self._cell_reg = self._grow(self._cell_reg, n)
            for k in self._arrays:
                self._arrays[k] = self._grow(self._arrays[k], n)
        self._cell_svc[rows] = svc
        self._cell_reg[rows] = reg
        for name in _SUMS:  # in other's order: acc + a (+ b ...), as merge's bincount adds
            np.add.at(self._arrays[name], rows, theirs[name])
        for name in _MAXES:
            np.maximum.at(self._arrays[name], rows, theirs[name])

    def _add_endpoints(self, other: WindowPartial, counters: dict,
                       renamed: dict[int, str]) -> None:
        endpoints = self.endpoints
        theirs = other.endpoints.items()
        if renamed:
            folded = set(renamed.values())
            theirs = [((OTHER_SERVICE if s in folded else s, e), n) for (s, e), n in theirs]
        if len(endpoints) + len(other.endpoints) <= MAX_ENDPOINTS:
            for key, n in theirs:
                endpoints[key] = endpoints.get(key, 0) + n
        else:
            for key, n in theirs:
                WindowPartial.add_endpoint(endpoints, key, n, counters)

    def snapshot(self) -> WindowPartial:
        """The window so far as a ``WindowPartial`` (cells sorted by (service, region)); O(window),
        for a report. Later ``add`` calls do not change it."""
        n = self._n
        order = np.lexsort((self._cell_reg[:n], self._cell_svc[:n]))
        cells = {k: a[:n][order] for k, a in self._arrays.items()}
        return WindowPartial(
            services=list(self.services),
            service_region=list(self.service_region),
            regions=list(self.regions),
            region_kind=self._kind[: len(self.regions)].copy(),
            region_estimated=self._est[: len(self.regions)].copy(),
            cell_svc=self._cell_svc[:n][order],
            cell_reg=self._cell_reg[:n][order],
            requests=self._requests[: len(self.services)].copy(),
            endpoints=dict(self.endpoints),
            traces=self._traces,
            spans=self.spans,
            counters=dict(self.counters),
            root_spans=self.root_spans,
            pending_traces=list(self._pending),
            **cells,
        )
