"""WindowPartial: what one window needs to remember, mergeable in order and serialisable.

The state is a dense grid of (service, region) cells, both axes in first-seen order, plus
per-region facts, per-service requests, per-endpoint I/O counts and the window's distinct
64-bit trace ids. Memory is O(services x regions + endpoints + traces), independent of the
number of spans. ``left.merge(right)`` equals scoring ``left``'s spans followed by ``right``'s:
left's first-seen facts win (service order, region order, each service's first region), and
regions beyond ``MAX_REGIONS`` fold into ``unknown`` exactly as the scorer folds them.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np
import orjson

from agent.carbon.tagcodes import CODE, TAGS, TO_UNKNOWN

MAX_REGIONS = 256  # distinct real regions per window; later ones are scored as "unknown"
MAX_ENDPOINTS = 4096  # (service, endpoint) keys per window; new ones then -> (service, "(other)")
UNKNOWN = "unknown"
OTHER_ENDPOINT = "(other)"
_CELL_FIELDS = ("energy", "carbon", "ops", "measured_ops", "span_count")


def bump(counters: dict[str, int], key: str, n: int = 1) -> None:
    if n:
        counters[key] = counters.get(key, 0) + n


def _grown(a: np.ndarray, rows: int, cols: int | None, dtype) -> np.ndarray:
    """A copy of ``a`` zero-padded to ``rows`` (x ``cols``); ``dtype`` when ``a`` is empty."""
    shape = (rows,) if cols is None else (rows, cols)
    if a.shape == shape:
        return a.copy()
    out = np.zeros(shape, dtype=a.dtype if a.size else dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


@dataclass(eq=False)
class WindowPartial:
    services: list[str]  # lowercased service keys, first-seen order
    service_region: list[int]  # region index of each service's first span
    regions: list[str]  # lowercased, first-seen order ("unknown" included where first seen)
    region_kind: np.ndarray  # (R,) int8 highest KIND_* used in the region
    region_estimated: np.ndarray  # (R,) bool: a live signal was wanted but stale
    energy: np.ndarray  # (S, R) kWh
    carbon: np.ndarray  # (S, R) gCO2e
    ops: np.ndarray  # (S, R) I/O operations
    measured_ops: np.ndarray  # (S, R) I/O operations whose energy came from a source
    span_count: np.ndarray  # (S, R) spans
    etag: np.ndarray  # (S, R) int8 highest energy-tag code (measured or io_proxy_v*)
    ltag: np.ndarray  # (S, R) int8 highest live-intensity tag code
    requests: np.ndarray  # (S,) entry spans
    endpoints: dict[tuple[str, str], int] = field(default_factory=dict)
    # sorted unique trace ids folded so far; read them with trace_ids(), which folds pending
    traces: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    spans: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    #: trace-id chunks not yet folded into ``traces`` (merges defer the sort: amortised O(n log n))
    pending_traces: list[np.ndarray] = field(default_factory=list, repr=False)

    def trace_ids(self) -> np.ndarray:
        """The window's distinct trace ids, sorted (folds pending chunks in)."""
        if self.pending_traces:
            self.traces = np.unique(np.concatenate([self.traces, *self.pending_traces]))
            self.pending_traces = []
        return self.traces

    @classmethod
    def empty(cls, counters: dict[str, int] | None = None) -> WindowPartial:
        z = np.zeros((0, 0))
        return cls(
            services=[],
            service_region=[],
            regions=[],
            region_kind=np.zeros(0, np.int8),
            region_estimated=np.zeros(0, np.bool_),
            energy=z,
            carbon=z.copy(),
            ops=z.astype(np.int64),
            measured_ops=z.astype(np.int64),
            span_count=z.astype(np.int64),
            etag=z.astype(np.int8),
            ltag=z.astype(np.int8),
            requests=np.zeros(0, np.int64),
            counters=dict(counters or {}),
        )

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
        services = list(self.services)
        s_index = {k: i for i, k in enumerate(services)}
        s_map = np.array(
            [s_index.setdefault(k, len(s_index)) for k in other.services], dtype=np.int64
        )
        services = list(s_index)
        regions, r_map, folded = self._merge_regions(other)
        bump(
            counters,
            "region_overflow",
            int(other.span_count[:, folded].sum()) if folded.any() else 0,
        )
        s, r = len(services), len(regions)
        ix = np.ix_(s_map, r_map)
        any_folded = bool(folded.any())
        out = {}
        for name in _CELL_FIELDS:
            theirs = getattr(other, name)
            grid = _grown(getattr(self, name), s, r, theirs.dtype)
            if not any_folded:  # other's cells land on distinct cells: plain fancy add
                grid[ix] += theirs
                out[name] = grid
                continue
            if name == "carbon":
                theirs = theirs.copy()
                theirs[:, folded] = 0.0  # spans of a folded region score as "unknown": 0 g
            np.add.at(grid, ix, theirs)  # folded regions share the unknown column
            out[name] = grid
        etag_o, ltag_o = other.etag, other.ltag
        if any_folded:
            etag_o = etag_o.copy()
            etag_o[:, folded] = TO_UNKNOWN[etag_o[:, folded]]
            ltag_o = np.where(folded[None, :], 0, ltag_o).astype(np.int8)
        for name, theirs in (("etag", etag_o), ("ltag", ltag_o)):
            grid = _grown(getattr(self, name), s, r, np.int8)
            if any_folded:
                np.maximum.at(grid, ix, theirs)
            else:
                grid[ix] = np.maximum(grid[ix], theirs)
            out[name] = grid
        kept = ~folded
        kind = _grown(self.region_kind, r, None, np.int8)
        np.maximum.at(kind, r_map[kept], other.region_kind[kept])
        est = _grown(self.region_estimated, r, None, np.bool_)
        est[r_map[kept & other.region_estimated]] = True
        requests = _grown(self.requests, s, None, np.int64)
        requests[s_map] += other.requests  # services map to distinct rows
        service_region = list(self.service_region) + [
            int(r_map[other.service_region[i]])
            for i in range(len(other.services))
            if s_map[i] >= len(self.services)
        ]
        endpoints = dict(self.endpoints)
        if len(endpoints) + len(other.endpoints) <= MAX_ENDPOINTS:  # no cap can apply
            for key, n in other.endpoints.items():
                endpoints[key] = endpoints.get(key, 0) + n
        else:
            for key, n in other.endpoints.items():
                WindowPartial.add_endpoint(endpoints, key, n, counters)
        traces, pending = self.traces, [*self.pending_traces, other.traces, *other.pending_traces]
        if sum(c.size for c in pending) > max(traces.size, 4096):
            traces, pending = np.unique(np.concatenate([traces, *pending])), []
        return WindowPartial(
            services=services,
            service_region=service_region,
            regions=regions,
            region_kind=kind,
            region_estimated=est,
            requests=requests,
            endpoints=endpoints,
            traces=traces.astype(np.uint64, copy=False),
            spans=self.spans + other.spans,
            counters=counters,
            pending_traces=pending,
            **out,
        )

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

    # ------------------------------------------------------------------ serialisation
    def to_bytes(self) -> bytes:
        """orjson bytes for the write-ahead log; ``from_bytes`` restores it exactly."""
        doc = {
            "v": 1,
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
            "etag": [[TAGS[c] for c in row] for row in self.etag.tolist()],
            "ltag": [[TAGS[c] for c in row] for row in self.ltag.tolist()],
        }
        for name in _CELL_FIELDS:
            doc[name] = getattr(self, name).tolist()
        return orjson.dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes) -> WindowPartial:
        doc = orjson.loads(data)
        if doc.get("v") != 1:
            raise ValueError(
                f"window partial version {doc.get('v')!r} is not supported; expected 1"
            )
        s, r = len(doc["services"]), len(doc["regions"])

        def grid(name: str, dtype) -> np.ndarray:
            return np.array(doc[name], dtype=dtype).reshape(s, r)

        def codes(name: str) -> np.ndarray:
            return np.array([[CODE[t] for t in row] for row in doc[name]], dtype=np.int8).reshape(
                s, r
            )

        return cls(
            services=doc["services"],
            service_region=doc["service_region"],
            regions=doc["regions"],
            region_kind=np.array(doc["region_kind"], dtype=np.int8),
            region_estimated=np.array(doc["region_estimated"], dtype=np.bool_),
            energy=grid("energy", np.float64),
            carbon=grid("carbon", np.float64),
            ops=grid("ops", np.int64),
            measured_ops=grid("measured_ops", np.int64),
            span_count=grid("span_count", np.int64),
            etag=codes("etag"),
            ltag=codes("ltag"),
            requests=np.array(doc["requests"], dtype=np.int64),
            endpoints={(s_, e): n for s_, e, n in doc["endpoints"]},
            traces=np.frombuffer(base64.b64decode(doc["traces"]), dtype="<u8").astype(np.uint64),
            spans=doc["spans"],
            counters=doc["counters"],
        )

    def same_as(self, other: WindowPartial, rel: float = 0.0) -> bool:
        """Equality of every field; floats within ``rel`` (0: bit-identical)."""
        ints = ("services", "service_region", "regions", "endpoints", "spans", "counters")
        if any(getattr(self, k) != getattr(other, k) for k in ints):
            return False
        self.trace_ids()
        other.trace_ids()
        arrays = (
            "region_kind",
            "region_estimated",
            "ops",
            "measured_ops",
            "span_count",
            "etag",
            "ltag",
            "requests",
            "traces",
        )
        if any(not np.array_equal(getattr(self, k), getattr(other, k)) for k in arrays):
            return False
        return all(
            getattr(self, k).shape == getattr(other, k).shape
            and np.allclose(getattr(self, k), getattr(other, k), rtol=rel, atol=0.0)
            for k in ("energy", "carbon")
        )

    @property
    def io_ops(self) -> int:
        return int(self.ops.sum())
