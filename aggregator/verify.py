"""The auditor's checks: hash chains, window invariants, and re-deriving a report.

Each finding names a place (``agent/file:line``), a kind and what it means, so an auditor can
go straight to the line. docs/auditors-guide.md explains every kind. Nothing here trusts the
archives: a line that cannot be read is itself a finding, never a crash.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from aggregator.compare import CompareError, Previous, check_previous, from_block
from aggregator.engines import run_local
from aggregator.files import ArchiveFile
from aggregator.market import MarketFactorsError, from_report
from aggregator.read import Period
from aggregator.report import build_report, content_hash
from aggregator.verify_inputs import named_as_stated
from aggregator.verify_lines import LineFinding, read_records
from schema.archive import BODY_KEY
from schema.chain import verify_chain
from schema.times import to_epoch
from schema.totals import TOTAL_TERMS, carbon_total, line_terms

log = logging.getLogger("carbonspan.verify")
REL_TOL = 1e-6
ABS_TOL = 1e-12
J_PER_KWH = 3.6e6


@dataclass(frozen=True, slots=True)
class Finding:
    location: str
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.kind}: {self.message}"


@dataclass
class ChainSummary:
    agent: str
    records: int
    first_hash: str | None
    last_hash: str | None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _numbers(mapping: Any) -> list[float] | None:
    if not isinstance(mapping, dict):
        return None
    values = list(mapping.values())
    if all(type(v) in (int, float) for v in values):
        return [float(v) for v in values]
    return None


def window_findings(location: str, rec: dict[str, Any]) -> list[Finding]:
    """The invariants of one window line: its host rows' energy, and those of a runtime line
    (per-service sums, carbon terms; v1.0 lines have no per-service maps to check)."""
    try:
        host_found = host_energy_findings(location, rec[BODY_KEY])
    except (KeyError, TypeError, AttributeError):
        host_found = []  # reported below as a malformed window
    return host_found + _runtime_findings(location, rec)


def _runtime_findings(location: str, rec: dict[str, Any]) -> list[Finding]:
    try:
        gs = rec[BODY_KEY]["green_summary"]
        energy_map = gs.get("per_service_energy_kwh") or {}
        carbon_map = gs.get("per_service_carbon_kgco2eq") or {}
        if not energy_map and not carbon_map:
            return []
        energies, carbons = _numbers(energy_map), _numbers(carbon_map)
        operational = gs["co2"]["operational_gco2"]
        hosts = [h for h in gs.get("hosts") or [] if isinstance(h, dict)]
        host_kwh = sum(h.get("energy_kwh", 0.0) for h in hosts if h.get("in_totals", True))
        energy = gs.get("energy_kwh", 0.0)
        figures = [operational, host_kwh, energy]
    except (KeyError, TypeError, AttributeError):
        return [Finding(location, "malformed_window", "the window lacks green_summary figures")]
    if energies is None or carbons is None or not all(type(x) in (int, float) for x in figures):
        return [Finding(location, "bad_value", "a per-service or total figure is not a number")]
    out = []
    if any(v < 0 for v in [*energies, *carbons, *figures]):
        out.append(Finding(location, "bad_value", "a figure is negative"))
    carbon_g = sum(carbons) * 1000.0
    if not _close(carbon_g, operational):
        out.append(Finding(location, "carbon_invariant",
                           f"sum of per_service_carbon x 1000 = {carbon_g:.9g} g but "
                           f"co2.operational_gco2 = {operational:.9g} g"))
    app = max(0.0, energy - host_kwh)
    if not _close(sum(energies), app):
        out.append(Finding(location, "energy_invariant",
                           f"sum of per_service_energy = {sum(energies):.9g} kWh but energy_kwh "
                           f"minus host energy = {app:.9g} kWh"))
    return out + _carbon_terms(location, rec[BODY_KEY], gs["co2"])


def _window_seconds(window: Any) -> float | None:
    """``window.end - window.start`` in seconds, or None when either is not a readable time."""
    if not isinstance(window, dict) or not isinstance(window.get("start"), str) or not isinstance(window.get("end"), str):
        return None
    try:
        return to_epoch(window["end"]) - to_epoch(window["start"])
    except ValueError:
        return None


def host_energy_findings(location: str, report: dict[str, Any]) -> list[Finding]:
    """Every host row draws its watts for the whole window: ``energy_kwh = watts x (end -
    start) / 3.6e6`` (docs/auditors-guide.md). The window's times are written to the
    microsecond, so up to 2 µs of the window's length (truncation of both ends) is allowed."""
    hosts = report["green_summary"].get("hosts") or []
    if not isinstance(hosts, list) or not hosts:
        return []
    seconds = _window_seconds(report.get("window"))
    out = []
    for i, row in enumerate(hosts):
        if not isinstance(row, dict):
            continue  # the chain and the aggregator report a line of this shape
        watts, energy = row.get("watts", 0.0), row.get("energy_kwh", 0.0)
        name = row.get("name") if isinstance(row.get("name"), str) else f"hosts[{i}]"
        if type(watts) not in (int, float) or type(energy) not in (int, float):
            out.append(Finding(location, "bad_value", f"host {name!r}: watts or energy_kwh is not a number"))
            continue
        if seconds is None:
            out.append(Finding(location, "host_energy_invariant",
                               f"host {name!r}: window.start/window.end are not readable times, so its "
                               f"{energy:.9g} kWh cannot be checked against {watts:g} W"))
            continue
        expected = watts * max(0.0, seconds) / J_PER_KWH
        slack = abs(watts) * 2e-6 / J_PER_KWH + REL_TOL * abs(expected) + ABS_TOL
        if not abs(energy - expected) <= slack:
            out.append(Finding(location, "host_energy_invariant",
                               f"host {name!r}: energy_kwh = {energy:.9g} kWh but watts {watts:g} W x "
                               f"window length {seconds:.6f} s / 3.6e6 = {expected:.9g} kWh"))
    return out


def _carbon_terms(location: str, report: dict[str, Any], co2: Any) -> list[Finding]:
    """``co2.total.mid`` = the carbon total of its terms (``schema.totals``: operational +
    embodied + database + messaging), and, where the line
    records how (``methodology.embodied_per`` and ``embodied_carbon_per_request_gco2``, lines
    since 2026-11-30), embodied = requests x per-request figure, requests being
    ``window.traces`` or ``window.root_spans``."""
    if not isinstance(co2, dict) or not isinstance(co2.get("total"), dict):
        return []
    terms = line_terms(co2)
    mid = co2["total"].get("mid")
    if not all(type(x) in (int, float) for x in [*terms, mid]):
        return []  # a non-number is reported by the checks above or is a missing optional figure
    out = []
    total = carbon_total(*terms)
    if not _close(mid, total):
        out.append(Finding(location, "total_invariant",
                           f"co2.total.mid = {mid:.9g} g but {' + '.join(TOTAL_TERMS)} = {total:.9g} g"))
    meth, window = report.get("methodology"), report.get("window")
    if not isinstance(meth, dict) or not isinstance(window, dict):
        return out
    unit, per = meth.get("embodied_per"), meth.get("embodied_carbon_per_request_gco2")
    field = {"trace": "traces", "root_span": "root_spans"}.get(unit) if isinstance(unit, str) else None
    if field is None or not isinstance(per, str):
        return out
    try:
        per_g = float(per)
    except ValueError:
        return [*out, Finding(location, "bad_value", f"methodology.embodied_carbon_per_request_gco2 {per!r} is not a number")]
    count, embodied = window.get(field), terms[TOTAL_TERMS.index("embodied")]
    if type(count) is int and math.isfinite(per_g) and not _close(count * per_g, embodied):
        out.append(Finding(location, "embodied_invariant",
                           f"co2.embodied_gco2 = {embodied:.9g} g but window.{field} {count} x "
                           f"{per_g:g} g per request = {count * per_g:.9g} g (embodied_per = {unit!r})"))
    return out


def _records(files: Sequence[ArchiveFile], out: list[Finding],
             reasons: dict[str, str]) -> Iterator[tuple[str, dict | None]]:
    """``(location, record or None)`` over files in order (``verify_lines`` reads them: why a
    line is None goes to ``reasons``); line and window findings go to ``out``."""
    line_found: list[LineFinding] = []
    for location, rec in read_records(files, line_found, reasons):
        out.extend(Finding(x.location, x.kind, x.message) for x in line_found)
        line_found.clear()
        if rec is not None:
            out.extend(window_findings(location, rec))
        yield location, rec
    out.extend(Finding(x.location, x.kind, x.message) for x in line_found)


def _remember_first(records: Iterator[tuple[str, dict | None]],
                    firsts: list[str]) -> Iterator[tuple[str, dict | None]]:
    for location, rec in records:
        if not firsts and rec is not None and isinstance(rec.get("hash"), str):
            firsts.append(rec["hash"])
        yield location, rec


def verify_archives(files: Sequence[ArchiveFile]) -> tuple[list[Finding], list[ChainSummary]]:
    """Check every agent's chain across its files, and every window's invariants."""
    findings: list[Finding] = []
    summaries = []
    for _, group in groupby(files, key=lambda f: f.group):
        group_files = list(group)
        window_found: list[Finding] = []
        firsts: list[str] = []
        reasons: dict[str, str] = {}  # location -> why that line is not a record
        records = _remember_first(_records(group_files, window_found, reasons), firsts)
        chain_found, last, count = verify_chain(records)
        first = firsts[0] if firsts else None
        findings.extend(Finding(c.location, c.kind, reasons.get(c.location, c.message)) for c in chain_found)
        findings.extend(window_found)
        summaries.append(ChainSummary(group_files[0].agent, count, first, last))
    return findings, summaries


def verify_report(files: Sequence[ArchiveFile], report: dict[str, Any],
                  previous: dict[str, Any] | None = None) -> list[Finding]:
    """Check the report's own hash, then re-derive it from ``files`` and compare hashes; a
    comparison is re-derived with ``previous`` (the previous report's JSON, ``--previous``) or
    else with the previous figures the report's comparison block states."""
    findings = []
    stated = (report.get("integrity") or {}).get("content_hash", "")
    try:
        recomputed = content_hash(report)
    except ValueError as exc:
        return [Finding("report", "report_unreadable", str(exc))]
    if recomputed != stated:
        findings.append(Finding("report", "report_hash_mismatch",
                                f"the report says {stated or '(none)'} but its content hashes to "
                                f"{recomputed}: it was edited after it was produced"))
    try:
        period = Period.from_labels(report["period"]["start"], report["period"]["end"])
    except (KeyError, TypeError, ValueError):
        return [*findings, Finding("report", "report_unreadable", "the report has no readable period")]
    try:  # a market-based figure is re-derived with the factors the report itself declares
        market = from_report(report)
    except MarketFactorsError as exc:
        return [*findings, Finding("report", "report_unreadable", str(exc))]
    try:
        prior = previous_of(report, previous, period)
    except CompareError as exc:
        return [*findings, Finding("report", "comparison_previous_mismatch", str(exc))]
    derived = build_report(run_local(files, period), period, str(report.get("organisation", "")), market, prior)
    fresh, derived_hash = derived.model_dump(mode="json"), derived.integrity.content_hash
    if derived_hash != recomputed:  # files renamed by rotation since? (identified by content)
        renamed, notes = named_as_stated(fresh, report)
        if notes and content_hash(renamed) == recomputed:
            for note in notes:
                log.warning("%s", note)
            fresh, derived_hash = renamed, recomputed
    if derived_hash != recomputed:  # do the figures present follow from the archives?
        differ = [k for k in fresh if k != "integrity" and fresh[k] != report.get(k)]
        chains = {c["agent"]: c for c in fresh["integrity"]["chains"]}
        for c in (report.get("integrity") or {}).get("chains") or []:
            now = chains.get(c.get("agent")) if isinstance(c, dict) else None
            if now is None or (now["first_hash"], now["last_hash"]) != (c.get("first_hash"), c.get("last_hash")):
                differ.append(f"integrity.chains[{c.get('agent') if isinstance(c, dict) else '?'}]")
        made = (report.get("schema_version"), report.get("produced_by") or "an earlier carbonspan")
        here = (fresh["schema_version"], fresh["produced_by"])
        if made[0] != here[0]:  # other rules made it: say so, never "it does not follow"
            findings.append(Finding("report", "rederivation_other_rules",
                                    f"the report was made by {made[1]} with report schema {made[0]}; "
                                    f"this is {here[1]} with schema {here[0]}, whose rules derive "
                                    f"{', '.join(differ) or 'integrity'} differently: re-derive it "
                                    f"with {made[1]} to check its figures (re-deriving here gives "
                                    f"{derived_hash}, not {recomputed})"))
        else:
            findings.append(Finding("report", "rederivation_mismatch",
                                    f"re-deriving from the archives gives {derived_hash}, "
                                    f"not {recomputed}; sections that differ: "
                                    f"{', '.join(differ) or 'integrity'}"))
    return findings


def previous_of(report: dict[str, Any], previous: dict[str, Any] | None, period: Period) -> Previous | None:
    """What the report's comparison is re-derived with: the previous report given (checked as
    ``aggregate --compare`` checks it, and it must be the one the block names), else the block
    itself (a note says the previous figures were not checked against that report)."""
    from schema.report import Comparison

    block = report.get("comparison")
    if block is None:
        if previous is not None:
            log.warning("--previous is not used: the report has no comparison block")
        return None
    try:
        stated = Comparison.model_validate(block)
    except ValueError as exc:
        raise CompareError(f"the report's comparison block cannot be read ({exc})") from None
    if previous is None:
        log.warning("the comparison with %s was re-derived from the previous figures this report states; "
                    "to check them against that report too, give it with --previous PREVIOUS.json",
                    stated.previous.content_hash)
        return from_block(stated)
    given = (previous.get("integrity") or {}).get("content_hash") if isinstance(previous.get("integrity"), dict) else None
    if given != stated.previous.content_hash:
        raise CompareError(f"--previous states the content hash {given or '(none)'}, but this report was "
                           f"compared with the report {stated.previous.content_hash} "
                           f"({stated.previous.period.start} to {stated.previous.period.end}): give that report")
    return check_previous(previous, period, "--previous")
