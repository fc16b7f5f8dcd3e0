"""Alumet (alumet-dev/alumet): RAPL and attributed energy, from its Prometheus exporter or CSV.

Alumet measures energy per measurement period (``rapl_consumed_energy``, joules consumed
since its previous measurement, attributes such as ``domain`` = package/dram/pp0/...), with
resource and consumer columns (``resource_kind``, ``consumer_kind``, ``consumer_id``...) that
the label rules map to services.

- CSV output (plugin-csv, ``metric;timestamp;value;resource_kind;...`` with ``;`` or ``,``):
  the file is followed like ``tail -f``; the rows written since the previous poll are summed,
  which is the energy of the interval. Extra columns and ``k=v`` pairs in
  ``__late_attributes`` are labels. Rotation/truncation restarts from the file's beginning.
- Prometheus exporter: a ``counter`` series is read like Kepler's (increase per interval);
  a ``gauge`` series holds the joules of Alumet's last measurement period, so watts =
  value / ``measure_interval_s`` and the interval's joules = watts x interval_s.

A metric matches ``metric`` exactly or with a unit suffix (``rapl_consumed_energy_J``).
Either way kWh/op = joules / 3.6e6 / ops.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from agent.sources.config import AlumetConfig
from agent.sources.energy import EnergySource, Reading
from agent.sources.errors import SourceError
from agent.sources.http import http_get
from agent.sources.prom import CounterDeltas, ServiceMatcher, prefilter, zone_ok

_ATTR = re.compile(r"([A-Za-z_][\w.]*)=([^,|;]*)")


class AlumetSource(EnergySource):
    kind = "alumet"
    tag = "alumet_rapl"
    settings: AlumetConfig

    def __init__(self, name: str, settings: AlumetConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, **kw)
        self._matcher = ServiceMatcher(settings.services)
        self._zones = frozenset(settings.zones)
        self._counters = CounterDeltas()
        self._tail = _CsvTail(settings.csv_path) if settings.csv_path else None

    def _wanted(self, metric: str) -> bool:
        m = self.settings.metric
        return metric == m or metric.startswith(m + "_")

    def read(self, elapsed_s: float | None) -> Reading | None:
        if self._tail is not None:
            rows = self._tail.new_rows()
            self.stats["discarded"] += self._tail.take_bad_lines()
            if elapsed_s is None:
                return None
            reading = self._sum(
                (labels, value) for metric, labels, value in rows if self._wanted(metric)
            )
            reading.total_watts = (reading.total_watts or 0.0) / elapsed_s
            return reading
        return self._read_prometheus(elapsed_s)

    def _read_prometheus(self, elapsed_s: float | None) -> Reading | None:
        cfg = self.settings
        assert cfg.url is not None
        body = http_get(cfg.url, timeout_s=cfg.timeout_s)
        counters: dict[object, float] = {}
        gauges: list[tuple[Mapping[str, str], float]] = []
        labels_of: dict[object, Mapping[str, str]] = {}
        try:
            text = prefilter(body.decode("utf-8"), (cfg.metric,))
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if not self._wanted(family.name) and not self._wanted(s.name):
                        continue
                    if family.type == "counter":
                        key = (s.name, tuple(sorted(s.labels.items())))
                        counters[key], labels_of[key] = float(s.value), s.labels
                    else:
                        gauges.append((s.labels, float(s.value)))
        except (UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError) as exc:
            raise SourceError(
                f"alumet {self.name}: {cfg.url} is not Prometheus exposition text ({exc})"
            ) from None
        if not counters and not gauges:
            raise SourceError(
                f"alumet {self.name}: {cfg.url} serves no {cfg.metric}* series; check `metric`"
            )
        deltas = self._counters.update(counters)
        self.stats["counter_resets"] = self._counters.resets
        if elapsed_s is None:
            return None
        per_period = cfg.measure_interval_s
        items = [(labels_of[k], d) for k, d in deltas.items()]
        items += [(labels, v / per_period * elapsed_s) for labels, v in gauges]
        reading = self._sum(items)
        reading.total_watts = (reading.total_watts or 0.0) / elapsed_s
        return reading

    def _sum(self, items: Iterable[tuple[Mapping[str, str], float]]) -> Reading:
        """Joules per service; ``total_watts`` holds the total joules until the caller divides."""
        cfg = self.settings
        joules: dict[str, float] = defaultdict(float)
        total = 0.0
        for labels, value in items:
            if not zone_ok(labels, cfg.zone_label, self._zones):
                continue
            if not math.isfinite(value) or value < 0:
                self.stats["discarded"] += 1
                continue
            total += value
            service = self._matcher.service(labels) if self._matcher else None
            if service is not None:
                joules[service] += value
            elif self._matcher:
                self.stats["unmatched_series"] += 1
        return Reading(service_joules=dict(joules), total_watts=total)


class _CsvTail:
    """Follows an Alumet CSV file; returns ``(metric, labels, joules)`` of complete new rows."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset: int | None = None  # None: not positioned yet (first poll seeks to the end)
        self._ino: int | None = None
        self._header: list[str] | None = None
        self._delim = ";"
        self._bad_lines = 0

    def take_bad_lines(self) -> int:
        """Lines the CSV reader could not split since the last call (counted as discarded)."""
        n, self._bad_lines = self._bad_lines, 0
        return n

    def new_rows(self) -> list[tuple[str, dict[str, str], float]]:
        try:
            st = os.stat(self.path)
            with open(self.path, "rb") as f:
                head = f.readline()
                if not head.endswith(b"\n"):
                    raise SourceError(f"alumet CSV {self.path}: no complete header line yet")
                self._read_header(head.decode("utf-8", "replace"))
                first = self._offset is None
                if first or st.st_ino != self._ino or st.st_size < (self._offset or 0):
                    self._offset = st.st_size if first else len(head)
                    self._ino = st.st_ino
                f.seek(self._offset)
                chunk = f.read(max(0, st.st_size - self._offset))
        except OSError as exc:
            raise SourceError(
                f"alumet CSV {self.path}: cannot read it ({exc.strerror or exc})"
            ) from None
        end = chunk.rfind(b"\n") + 1  # only complete lines; a half-written row waits
        self._offset += end
        return self._parse(chunk[:end].decode("utf-8", "replace"))

    def _read_header(self, line: str) -> None:
        self._delim = ";" if line.count(";") >= line.count(",") else ","
        header = [h.strip() for h in line.strip().split(self._delim)]
        if header[:3] != ["metric", "timestamp", "value"]:
            raise SourceError(
                f"alumet CSV {self.path}: header must start with metric,timestamp,value; got {header[:3]}"
            )
        self._header = header

    def _rows(self, text: str) -> list[list[str]]:
        """CSV rows; if the reader chokes (a field over csv's size limit), line by line,
        skipping and counting the lines it cannot split, so one bad line loses only itself."""
        try:
            return list(csv.reader(io.StringIO(text), delimiter=self._delim))
        except csv.Error:
            rows = []
            for line in text.splitlines():
                try:
                    rows.extend(csv.reader([line], delimiter=self._delim))
                except csv.Error:
                    self._bad_lines += 1
            return rows

    def _parse(self, text: str) -> list[tuple[str, dict[str, str], float]]:
        assert self._header is not None
        out = []
        for row in self._rows(text):
            if len(row) < 3 or row[0] == "metric":
                continue
            try:
                value = float(row[2])
            except ValueError:
                value = math.nan  # counted as discarded by the caller
            labels = {k: v for k, v in zip(self._header[3:], row[3:], strict=False) if v != ""}
            late = labels.pop("__late_attributes", "")
            labels.update((k, v) for k, v in _ATTR.findall(late))
            out.append((row[0], labels, value))
        return out
