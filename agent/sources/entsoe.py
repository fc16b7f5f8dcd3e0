"""ENTSO-E Transparency Platform: actual generation per production type -> gCO2eq/kWh.

``GET {base}/api?securityToken=T&documentType=A75&processType=A16&in_Domain=EIC
&periodStart=YYYYMMDDHHMM&periodEnd=YYYYMMDDHHMM`` answers a ``GL_MarketDocument`` with one
``TimeSeries`` per production type (``MktPSRType/psrType`` B01..B20) and ``Period``s of
``Point``s (``position``, ``quantity`` in MW) at ``resolution`` PT15M, PT30M or PT60M. One
request per bidding zone per poll, from 24 hours before the current hour to its end (UTC).

Intensity of one interval t, over the production types i reported for it:

    I(t) = Σ_i MW_i(t) × EF_i / Σ_i MW_i(t)          [gCO2eq/kWh]

with the life-cycle factors EF of ``entsoe_tables.PRODUCTION_TYPES`` (pumped-storage
generation, B10, is left out of both sums). Rules, each a test:

- A ``TimeSeries`` with ``outBiddingZone_Domain.mRID`` is consumption (pumping), not
  generation: ignored and counted (``series_consumption``). One with an unknown psrType, a
  unit other than MW (``MAW``) or an unreadable period is skipped (``series_skipped``).
- Series of different resolutions are laid on one grid of the finest step: an hourly MW
  value (an hour's mean power) stands for each of its quarter hours.
- A negative quantity is clamped to 0 MW (``points_clamped``: a type that consumed more than
  it produced generated nothing); a non-numeric, NaN, infinite or absurd one (above 1e6 MW,
  more than Europe's whole fleet) is dropped, as if not reported (``points_refused``). The
  counters hold the latest answer of each zone, summed over zones.
- **Which interval:** data per type arrives at different times, so the newest intervals are
  often partial. A type is *major* if it produced at least 1 % of the answer's generation;
  the reading is the latest interval in which every major type is reported, and its period
  ends at that interval's end (so staleness counts from there). A minor type missing from
  that interval makes the reading ``estimated``; with no interval holding every major type,
  the latest interval is used, estimated.
- **Signal log** (``[agent.signal_log]``): every interval of the answer in which every major
  type is reported becomes an observation row (``schema.signal_log``; source ``entsoe-a75``,
  known at the fetch), not only the latest: ENTSO-E often publishes several quarter hours at
  once, and a log of only the latest would have gaps. A later answer that changes an
  interval's value (a late minor type) adds a new observation of it.
- An ``Acknowledgement_MarketDocument`` (e.g. 999 "No matching data found") is a
  ``SourceError`` with its reason; HTTP 401/403 a ``SourceAuthError`` saying to set the
  token. The token is never in an error message: the URL is shown with ``securityToken=***``.
- XML: ``xml.etree.ElementTree`` (expat >= 2.4.1 bounds entity expansion; external entities
  are never fetched) on a body capped at 8 MiB, and a document with a DTD is refused before
  parsing (ENTSO-E's never have one), so no entity can be declared at all.
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import ClassVar

from agent.sources.config import GridOperatorConfig
from agent.sources.entsoe_tables import BIDDING_ZONES, PRODUCTION_TYPES, eic_is_valid, zone_by_name
from agent.sources.errors import (
    ConfigError,
    SourceAuthError,
    SourceError,
    SourceHTTPError,
)
from agent.sources.http import http_get
from agent.sources.liveutil import MAX_PLAUSIBLE_GCO2_KWH as MAX_PLAUSIBLE
from agent.sources.liveutil import check_intensity, parse_time, read_secret
from agent.sources.operators import OperatorReading
from agent.sources.zones import DEFAULT_ZONES, zone_for
from schema.signal_log import make_row

ENTSOE_BASE_URL = "https://web-api.tp.entsoe.eu"
LOOKBACK_S = 24 * 3600
MAX_XML_BYTES = 8 * 1024 * 1024  # a day of 15-minute values for 20 types is ~200 kB
MAJOR_SHARE = 0.01
MAX_MW = 1e6
STAT_KEYS = ("points_clamped", "points_refused", "series_consumption", "series_skipped")
SIGNAL_SOURCE = "entsoe-a75"
SIGNAL_VERSION = "A75-A16/ipcc-ar5-lifecycle"  # the document and the factors (entsoe_tables)

_BY_EM_ZONE = {z.em_zone: z for z in BIDDING_ZONES}
_BY_EIC = {z.eic: z for z in BIDDING_ZONES}
#: Every cloud region of zones.py on a bidding zone here, then ISO codes of one-zone countries.
DEFAULT_REGIONS: tuple[str, ...] = tuple(
    sorted(r for r, z in DEFAULT_ZONES.items() if z in _BY_EM_ZONE)
) + tuple(sorted(z.em_zone.lower() for z in BIDDING_ZONES if len(z.em_zone) == 2))


def eic_for(region: str, zone_map: dict[str, str]) -> str | None:
    """The EIC of ``region``: ``zone_map`` (a zone key, an Electricity Maps zone or an EIC),
    else the region's Electricity Maps zone (``zones.py``) when it is a bidding zone here."""
    override = {k.lower(): v for k, v in zone_map.items()}.get(region.lower())
    if override is not None:
        zone = zone_by_name(override)
        if zone is not None:
            return zone.eic
        return override.strip().upper() if eic_is_valid(override.strip().upper()) else None
    em = zone_for(region, {})
    zone = _BY_EM_ZONE.get(em) if em else None
    return zone.eic if zone else None


def zone_label(eic: str) -> str:
    zone = _BY_EIC.get(eic)
    return f"{zone.key} ({eic})" if zone else eic


class EntsoE:
    """ENTSO-E Transparency Platform REST API, one request per bidding zone."""

    key: ClassVar[str] = "entsoe"
    default_base_url: ClassVar[str] = ENTSOE_BASE_URL
    default_regions: ClassVar[tuple[str, ...]] = DEFAULT_REGIONS
    # Actual generation is published up to an hour after the interval (Regulation (EU)
    # 543/2013, art. 16): the last complete interval is often 60-75 min old when fetched, so
    # the global 1 h bound would make nearly every reading stale on arrival.
    default_max_age_s: ClassVar[float | None] = 7200.0

    def __init__(self, name: str = "entsoe", cfg: GridOperatorConfig | None = None) -> None:
        self.name = name
        self.cfg = cfg or GridOperatorConfig(operator="entsoe")
        self.stats: dict[str, int] = dict.fromkeys(STAT_KEYS, 0)
        self._per_zone: dict[str, dict[str, int]] = {}
        self._token = ""

    def zones(self, regions: Iterable[str]) -> dict[str, str]:
        out = {r.lower(): eic_for(r, self.cfg.zone_map) for r in regions}
        unknown = sorted(r for r, z in out.items() if z is None)
        if unknown:
            raise ConfigError(
                f"sources.grid_operator {self.name}: no ENTSO-E bidding zone known for region(s) "
                f"{', '.join(unknown)}; add them to zone_map, e.g. zone_map = "
                f"{{ {unknown[0]!r} = 'DE-LU' }} (a zone of docs/energy-sources.md or an EIC code)"
            )
        return {r: z for r, z in out.items() if z}

    def start(self) -> None:
        self._token = read_secret(
            self.cfg.token_env(),
            self.cfg.api_key_file,
            f"sources.grid_operator {self.name}",
            "ENTSO-E security token",
            "register on transparency.entsoe.eu, ask transparency@entsoe.eu for "
            '"Restful API access", then export the token, or remove this [[sources.grid_operator]]',
        )

    def _redact(self, text: str) -> str:
        for secret in {urllib.parse.quote(self._token, safe=""), self._token}:
            if secret:
                text = text.replace(secret, "***")
        return text

    def fetch(self, base_url: str, zone: str, timeout_s: float, now: float) -> OperatorReading:
        end = (int(now) // 3600 + 1) * 3600
        start = end - 3600 - LOOKBACK_S
        query = (
            f"documentType=A75&processType=A16&in_Domain={urllib.parse.quote(zone)}"
            f"&periodStart={_stamp(start)}&periodEnd={_stamp(end)}"
        )
        api = f"{base_url.rstrip('/')}/api"
        url = f"{api}?securityToken={urllib.parse.quote(self._token, safe='')}&{query}"
        where = f"grid_operator {self.name} {zone_label(zone)} ({api}?securityToken=***&{query})"
        failure: SourceError | None = None
        body = b""
        try:
            body = http_get(
                url,
                timeout_s=timeout_s,
                headers={"Accept": "application/xml"},
                max_bytes=MAX_XML_BYTES,
            )
        except SourceAuthError as exc:
            status = re.search(r"HTTP (\d{3})", str(exc))
            failure = SourceAuthError(
                f"{where}: ENTSO-E refused the security token (HTTP "
                f"{status.group(1) if status else '401'}): set a valid token in "
                + (
                    f"api_key_file {self.cfg.api_key_file!r}"
                    if self.cfg.api_key_file
                    else f"the environment variable {self.cfg.token_env()}"
                )
            )
        except SourceHTTPError as exc:
            reason = acknowledgement(exc.body)
            failure = SourceError(
                f"{where}: ENTSO-E answered HTTP {exc.status}: {reason}"
                if reason
                else f"{where}: {exc}"
            )
        except SourceError as exc:
            failure = SourceError(f"{where}: {exc}")
        if failure is None:
            counts = dict.fromkeys(STAT_KEYS, 0)
            try:
                return parse_a75(body, where, (start, end), counts, now, zone)
            except SourceError as exc:
                failure = exc
            finally:
                self._count(zone, counts)
        # built outside the except blocks: no chained exception keeps the unredacted URL
        raise type(failure)(self._redact(str(failure)))

    def _count(self, zone: str, counts: dict[str, int]) -> None:
        self._per_zone[zone] = counts
        for k in STAT_KEYS:
            self.stats[k] = sum(c[k] for c in self._per_zone.values())


def _stamp(t: float) -> str:
    return time.strftime("%Y%m%d%H%M", time.gmtime(t))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(el: ET.Element, *path: str) -> ET.Element | None:
    for name in path:
        el = next((c for c in el if _local(c.tag) == name), None)  # type: ignore[assignment]
        if el is None:
            return None
    return el


def _text(el: ET.Element, *path: str) -> str | None:
    found = _child(el, *path)
    return found.text.strip() if found is not None and found.text else None


def _parse_xml(body: bytes, where: str) -> ET.Element:
    head = body.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not head.startswith(b"<"):
        raise SourceError(f"{where}: the answer is not an XML document")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise SourceError(f"{where}: the answer declares a DTD; ENTSO-E documents do not, refused")
    try:
        return ET.fromstring(body)
    except ET.ParseError as exc:
        raise SourceError(f"{where}: the answer is not well-formed XML ({exc})") from None


def acknowledgement(body: bytes) -> str | None:
    """``"code: text"`` of an ``Acknowledgement_MarketDocument``, else ``None``."""
    try:
        root = _parse_xml(body, "")
    except SourceError:
        return None
    if _local(root.tag) != "Acknowledgement_MarketDocument":
        return None
    reasons = [c for c in root if _local(c.tag) == "Reason"]
    parts = [f"{_text(r, 'code') or '?'}: {_text(r, 'text') or ''}".strip() for r in reasons]
    return ("; ".join(parts) or "an Acknowledgement_MarketDocument without a reason")[:500]


def _resolution(text: str | None) -> int | None:
    m = re.fullmatch(r"PT(\d{1,4})([MH])", text or "")
    if not m or int(m.group(1)) == 0:
        return None
    return int(m.group(1)) * (60 if m.group(2) == "M" else 3600)


def _quantity(text: str | None, counts: dict[str, int]) -> float | None:
    try:
        q = float(text or "")
    except ValueError:
        q = math.nan
    if not math.isfinite(q) or q > MAX_MW:
        counts["points_refused"] += 1
        return None
    if q < 0:
        counts["points_clamped"] += 1
        return 0.0
    return q


Segment = tuple[str, int, int, float]  # psrType, start, end (unix s), MW


def _segments(ts: ET.Element, psr: str, counts: dict[str, int]) -> list[Segment] | None:
    """A generation series' (type, start, end, MW) spans; ``None`` if a period is unreadable."""
    out: list[Segment] = []
    fill = _text(ts, "curveType") == "A03"  # a point holds until the next one
    for period in (c for c in ts if _local(c.tag) == "Period"):
        res = _resolution(_text(period, "resolution"))
        try:
            p0 = int(parse_time(_text(period, "timeInterval", "start"), "start"))
            p1 = int(parse_time(_text(period, "timeInterval", "end"), "end"))
        except SourceError:
            return None
        if res is None or p1 <= p0 or (p1 - p0) % res:
            return None
        n = (p1 - p0) // res
        points: dict[int, float | None] = {}
        for point in (c for c in period if _local(c.tag) == "Point"):
            pos_text = _text(point, "position") or ""
            if not pos_text.isdigit() or not 1 <= int(pos_text) <= n:
                counts["points_refused"] += 1
                continue
            points[int(pos_text)] = _quantity(_text(point, "quantity"), counts)
        positions = sorted(points)
        for i, pos in enumerate(positions):
            mw = points[pos]
            if mw is None:
                continue
            last = (positions[i + 1] if i + 1 < len(positions) else n + 1) if fill else pos + 1
            out.append((psr, p0 + (pos - 1) * res, p0 + (last - 1) * res, mw))
    return out


def parse_a75(
    body: bytes,
    where: str,
    window: tuple[int, int],
    counts: dict[str, int],
    observed_s: float | None = None,
    zone: str = "",
) -> OperatorReading:
    """The reading of an A75 answer (see the module docstring); ``counts`` gets the counters.
    With ``observed_s`` (the fetch), the reading also carries a signal-log row per interval
    in which every major type is reported (region ``zone``)."""
    root = _parse_xml(body, where)
    kind = _local(root.tag)
    if kind == "Acknowledgement_MarketDocument":
        raise SourceError(f"{where}: ENTSO-E answered {acknowledgement(body)}")
    if kind != "GL_MarketDocument":
        raise SourceError(f"{where}: expected a GL_MarketDocument, got {kind}")
    segments: list[Segment] = []
    for ts in (c for c in root if _local(c.tag) == "TimeSeries"):
        if _child(ts, "outBiddingZone_Domain.mRID") is not None:
            counts["series_consumption"] += 1
            continue
        psr = _text(ts, "MktPSRType", "psrType") or ""
        readable = (
            psr in PRODUCTION_TYPES
            and _child(ts, "inBiddingZone_Domain.mRID") is not None
            and _text(ts, "quantity_Measure_Unit.name") in (None, "MAW")
        )
        spans = _segments(ts, psr, counts) if readable else None
        if spans is None:
            counts["series_skipped"] += 1
        elif PRODUCTION_TYPES[psr].gco2_kwh is not None:
            segments.extend(spans)
    lo, hi = window
    segments = [(p, max(a, lo), min(b, hi), mw) for p, a, b, mw in segments if a < hi and b > lo]
    if not segments:
        raise SourceError(f"{where}: no generation data in the answer")
    step = 0
    for _, a, b, _ in segments:
        step = math.gcd(step, a, b)
    if step < 60:
        raise SourceError(f"{where}: intervals are not on whole minutes")
    grid: dict[str, dict[int, float]] = {}
    for psr, a, b, mw in segments:
        cells = grid.setdefault(psr, {})
        for t in range(a, b, step):
            cells[t] = mw  # a later point for the same type and time replaces an earlier one
    totals = {p: math.fsum(cells.values()) for p, cells in grid.items()}
    total = math.fsum(totals.values())
    major = {p for p, t in totals.items() if t >= MAJOR_SHARE * total}
    steps = sorted(set().union(*grid.values()))
    complete = [t for t in steps if all(t in grid[p] for p in major)]
    chosen = complete[-1] if complete else steps[-1]
    mix = {p: cells[chosen] for p, cells in grid.items() if chosen in cells}
    megawatts = math.fsum(mix.values())
    if megawatts <= 0:
        raise SourceError(f"{where}: generation is 0 MW in the latest interval")
    value = check_intensity(_intensity(mix), where)
    rows = []
    for t in complete if observed_s is not None else ():
        cell = {p: cells[t] for p, cells in grid.items() if t in cells}
        if math.fsum(cell.values()) <= 0:
            continue
        v = _intensity(cell)
        if v <= MAX_PLAUSIBLE:
            rows.append(make_row(zone, t * 1000, (t + step) * 1000, v, SIGNAL_SOURCE, SIGNAL_VERSION,
                                 observed_ms=int(observed_s * 1000)))
    return OperatorReading(value, float(chosen + step), not complete or len(mix) < len(grid), tuple(rows))


def _intensity(mix: dict[str, float]) -> float:
    """Σ MW × EF / Σ MW over one interval's mix (gCO2eq/kWh)."""
    grams = math.fsum(mw * (PRODUCTION_TYPES[p].gco2_kwh or 0.0) for p, mw in mix.items())
    return grams / math.fsum(mix.values())
