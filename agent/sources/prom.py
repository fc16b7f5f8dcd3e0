"""Prometheus exposition text -> samples; label rules -> services; counters -> deltas.

Parsing is ``prometheus_client.parser.text_string_to_metric_families`` (the reference
implementation), not a parser of our own. Scaphandre, Kepler, Alumet's exporter and
node_exporter all speak this format; what differs is which metric and labels matter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agent.sources.errors import SourceError

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float
    type: str  # the family's type: "counter", "gauge", "untyped", ...

    @property
    def key(self) -> tuple[str, LabelKey]:
        return self.name, tuple(sorted(self.labels.items()))


def prefilter(
    text: str, prefixes: tuple[str, ...], zone_label: str = "", zones: frozenset[str] = frozenset()
) -> str:
    """Only the lines of metrics whose name starts with one of ``prefixes`` (and their
    ``# HELP``/``# TYPE`` lines), minus samples of an unwanted RAPL zone. Exporters serve many
    metrics and the reference parser costs ~0.1 ms per sample on a busy core, so lines we
    would drop anyway are not parsed at all. The kept lines are parsed by the library."""
    zone_rx = re.compile(rf'[{{,]\s*{re.escape(zone_label)}="([^"]*)"') if zone_label and zones else None
    keep = []
    for line in text.splitlines():
        name = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if not name.startswith(prefixes):
            continue
        if zone_rx is not None and line[0] != "#":
            m = zone_rx.search(line)
            if m is not None and m.group(1) not in zones:
                continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def parse_exposition(
    body: bytes, names: Iterable[str], where: str, zone_label: str = "", zones: frozenset[str] = frozenset()
) -> list[Sample]:
    """Samples whose name is in ``names``; a body that is not exposition text is a SourceError."""
    wanted = frozenset(names)
    try:
        text = prefilter(body.decode("utf-8"), tuple(wanted), zone_label, zones)
        out = [
            Sample(s.name, s.labels, float(s.value), family.type)
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name in wanted
        ]
    except (UnicodeDecodeError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise SourceError(f"{where}: the body is not Prometheus exposition text ({exc})") from None
    return out


class ServiceMatcher:
    """Maps a series' labels to a service by configured rules, first rule wins.

    ``rules`` is ``{service: [{label: regex, ...}, ...]}``: a series belongs to the first
    service one of whose label sets fully matches (every named label present and its value
    matching the regular expression with ``re.search``). A series missing a named label does
    not match that rule.
    """

    def __init__(self, rules: Mapping[str, list[Mapping[str, str]]]) -> None:
        self._rules: list[tuple[str, list[tuple[str, re.Pattern[str]]]]] = [
            (service.lower(), [(label, re.compile(rx)) for label, rx in alt.items()])
            for service, alts in rules.items()
            for alt in alts
        ]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def service(self, labels: Mapping[str, str]) -> str | None:
        for service, conds in self._rules:
            if all(label in labels and rx.search(labels[label]) for label, rx in conds):
                return service
        return None


class CounterDeltas:
    """Deltas of monotonic counters between polls, with Prometheus reset semantics.

    A counter lower than at the previous poll was reset (the exporter restarted): its delta
    is its current value, as ``increase()`` assumes. A series seen for the first time has no
    delta yet (its total since the exporter started is not this interval's energy). Series
    that disappear are forgotten. Non-finite values are dropped and counted.
    """

    def __init__(self) -> None:
        self._prev: dict[object, float] = {}
        self.resets = 0
        self.discarded = 0

    def update(self, values: Mapping[object, float]) -> dict[object, float]:
        deltas: dict[object, float] = {}
        current: dict[object, float] = {}
        for key, value in values.items():
            if not math.isfinite(value) or value < 0:
                self.discarded += 1
                continue
            current[key] = value
            prev = self._prev.get(key)
            if prev is None:
                continue
            if value < prev:
                self.resets += 1
                deltas[key] = value
            else:
                deltas[key] = value - prev
        self._prev = current
        return deltas


def zone_ok(labels: Mapping[str, str], zone_label: str, zones: frozenset[str]) -> bool:
    """Keep a series whose zone is wanted; a series without the zone label is kept.

    RAPL zones overlap (``package`` contains ``core`` and ``uncore``; ``psys`` contains the
    package and DRAM), so summing every zone would count the same joules twice.
    """
    zone = labels.get(zone_label)
    return zone is None or not zones or zone in zones


def finite_sum(values: Iterator[float] | Iterable[float]) -> float:
    return math.fsum(v for v in values if math.isfinite(v))
