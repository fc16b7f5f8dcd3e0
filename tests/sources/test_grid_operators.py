"""ENTSO-E (A75 actual generation per production type) and RTE éCO2mix on loopback servers.

Every answer is in the API's real format: ENTSO-E's ``GL_MarketDocument`` and
``Acknowledgement_MarketDocument`` XML, ODRÉ's Explore v2.1 JSON. Expected intensities are
worked by hand beside the assertions with the factors of ``entsoe_tables.PRODUCTION_TYPES``
(gas 490, hard coal and lignite 820, biomass 230, solar 48, hydro 24, nuclear 12, wind 11).
"""

from __future__ import annotations

import logging
import urllib.parse
from datetime import UTC, datetime

import orjson
import pytest

from agent.sources import entsoe
from agent.sources.config import parse_sources
from agent.sources.entsoe import DEFAULT_REGIONS, STAT_KEYS, parse_a75
from agent.sources.entsoe_tables import BIDDING_ZONES, PRODUCTION_TYPES, eic_is_valid
from agent.sources.errors import ConfigError, SourceError, SourceStartError
from agent.sources.manager import SourceManager

from .conftest import ManualClock, Route

NS = "urn:iec62325.351:tc57wg16:451-6:generationloaddocument:3:0"
FR, DE_LU, CZ = "10YFR-RTE------C", "10Y1001A1001A82H", "10YCZ-CEPS-----N"
TOKEN = "3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7"  # the shape of an ENTSO-E security token
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%MZ")


# ---- a real answer, as the Transparency Platform sends it (DE-LU, 12:00-13:00 UTC) -----------
DE_LU_DOC = f"""<?xml version="1.0" encoding="UTF-8"?>
<GL_MarketDocument xmlns="{NS}">
\t<mRID>5f1d3c2b9a8e4f7d8c6b5a4e3d2c1b0a</mRID>
\t<revisionNumber>1</revisionNumber>
\t<type>A75</type>
\t<process.processType>A16</process.processType>
\t<sender_MarketParticipant.mRID codingScheme="A01">10X1001A1001A450</sender_MarketParticipant.mRID>
\t<sender_MarketParticipant.marketRole.type>A32</sender_MarketParticipant.marketRole.type>
\t<receiver_MarketParticipant.mRID codingScheme="A01">10X1001A1001A450</receiver_MarketParticipant.mRID>
\t<receiver_MarketParticipant.marketRole.type>A33</receiver_MarketParticipant.marketRole.type>
\t<createdDateTime>2026-11-30T13:20:05Z</createdDateTime>
\t<time_Period.timeInterval>
\t\t<start>2026-11-30T12:00Z</start>
\t\t<end>2026-11-30T13:00Z</end>
\t</time_Period.timeInterval>
""" + "".join(
    f"""\t<TimeSeries>
\t\t<mRID>{i}</mRID>
\t\t<businessType>{"A04" if direction == "out" else "A01"}</businessType>
\t\t<objectAggregation>A08</objectAggregation>
\t\t<{direction}BiddingZone_Domain.mRID codingScheme="A01">{DE_LU}</{direction}BiddingZone_Domain.mRID>
\t\t<quantity_Measure_Unit.name>MAW</quantity_Measure_Unit.name>
\t\t<curveType>A01</curveType>
\t\t<MktPSRType>
\t\t\t<psrType>{psr}</psrType>
\t\t</MktPSRType>
\t\t<Period>
\t\t\t<timeInterval>
\t\t\t\t<start>2026-11-30T12:00Z</start>
\t\t\t\t<end>2026-11-30T13:00Z</end>
\t\t\t</timeInterval>
\t\t\t<resolution>{res}</resolution>
"""
    + "".join(
        f"\t\t\t<Point>\n\t\t\t\t<position>{p}</position>\n\t\t\t\t<quantity>{q}</quantity>\n\t\t\t</Point>\n"
        for p, q in enumerate(quantities, 1)
    )
    + "\t\t</Period>\n\t</TimeSeries>\n"
    for i, (psr, direction, res, quantities) in enumerate(
        [
            ("B19", "in", "PT15M", [18000, 19000, 19500, 20000]),  # wind onshore
            ("B16", "in", "PT15M", [4400, 4300, 4100, 4000]),  # solar
            ("B04", "in", "PT15M", [5200, 5100, 5050, 5000]),  # gas
            ("B02", "in", "PT60M", [8000]),  # lignite, hourly
            ("B05", "in", "PT60M", [3000]),  # hard coal, hourly
            ("B01", "in", "PT60M", [4500]),  # biomass, hourly
            ("B10", "in", "PT15M", [600, 600, 650, 600]),  # pumped-storage generation: left out
            ("B10", "out", "PT15M", [900, 900, 850, 900]),  # pumping: consumption, ignored
        ],
        1,
    )
) + "</GL_MarketDocument>\n"

# the last quarter hour, 12:45-13:00, every type reported (hourly types by their hour):
#   wind 20000×11 + solar 4000×48 + gas 5000×490 + lignite 8000×820 + coal 3000×820 + biomass 4500×230
#   = 220,000 + 192,000 + 2,450,000 + 6,560,000 + 2,460,000 + 1,035,000 = 12,917,000 g·MW/kWh
#   / (20000 + 4000 + 5000 + 8000 + 3000 + 4500 = 44,500 MW) = 290.2696... gCO2eq/kWh
DE_LU_LAST = 12_917_000 / 44_500


def series(psr: str, start: float, res: str, quantities: list, *, zone: str = DE_LU, direction: str = "in",
           curve: str = "A01", unit: str = "MAW") -> str:
    """One TimeSeries; a ``None`` quantity leaves its point out (not yet published)."""
    step = {"PT15M": 900, "PT30M": 1800, "PT60M": 3600}[res]
    points = "".join(f"<Point><position>{p}</position><quantity>{q}</quantity></Point>"
                     for p, q in enumerate(quantities, 1) if q is not None)
    return (f"<TimeSeries><mRID>1</mRID><businessType>A01</businessType><objectAggregation>A08</objectAggregation>"
            f'<{direction}BiddingZone_Domain.mRID codingScheme="A01">{zone}</{direction}BiddingZone_Domain.mRID>'
            f"<quantity_Measure_Unit.name>{unit}</quantity_Measure_Unit.name><curveType>{curve}</curveType>"
            f"<MktPSRType><psrType>{psr}</psrType></MktPSRType><Period><timeInterval><start>{ts(start)}</start>"
            f"<end>{ts(start + step * len(quantities))}</end></timeInterval><resolution>{res}</resolution>"
            f"{points}</Period></TimeSeries>")


def a75(*parts: str, start: float = NOON, end: float = NOON + 3600) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><GL_MarketDocument xmlns="{NS}"><type>A75</type>'
            f"<process.processType>A16</process.processType><time_Period.timeInterval><start>{ts(start)}</start>"
            f"<end>{ts(end)}</end></time_Period.timeInterval>{''.join(parts)}</GL_MarketDocument>").encode()


def acknowledgement(code: str = "999", text: str = "No matching data found for Data item ACTUAL_GENERATION_PER_"
                    "PRODUCTION_TYPE [16.1.B&amp;C] and interval 2026-11-29T12:00:00.000Z/2026-11-30T13:00:00.000Z.") -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Acknowledgement_MarketDocument xmlns="urn:iec62325.351:tc57wg16:'
            f'451-1:acknowledgementdocument:7:0"><mRID>2a6f3b1c-ack</mRID><createdDateTime>2026-11-30T13:20:05Z'
            f'</createdDateTime><sender_MarketParticipant.mRID codingScheme="A01">10X1001A1001A450'
            f"</sender_MarketParticipant.mRID><sender_MarketParticipant.marketRole.type>A32"
            f"</sender_MarketParticipant.marketRole.type><received_MarketDocument.createdDateTime>2026-11-30T13:20:05Z"
            f"</received_MarketDocument.createdDateTime><Reason><code>{code}</code><text>{text}</text></Reason>"
            f"</Acknowledgement_MarketDocument>").encode()


def parse(body: bytes, window=(int(NOON) - 86400, int(NOON) + 7200)):
    counts = dict.fromkeys(STAT_KEYS, 0)
    return parse_a75(body, "test", window, counts), counts


# ---- the parser ------------------------------------------------------------------------------
def test_a_real_a75_document_by_hand():
    reading, counts = parse(DE_LU_DOC.encode())
    assert reading.gco2_kwh == pytest.approx(DE_LU_LAST, rel=1e-12)  # 290.27 (hand calculation above)
    assert reading.period_end == NOON + 3600  # the end of the last interval used, 13:00
    assert reading.estimated is False
    assert counts["series_consumption"] == 1  # the pumping series
    assert counts["series_skipped"] == counts["points_refused"] == counts["points_clamped"] == 0


def test_consumption_is_not_generation():
    """The pumping series (out) carries 900 MW; counting it as generation at hydro's 24 g would
    give (12,917,000 + 900×24) / (44,500 + 900) = 284.99, not 290.27."""
    last = DE_LU_DOC.rindex("<TimeSeries>")  # the pumping series, read as run-of-river generation
    as_generation = DE_LU_DOC[:last] + DE_LU_DOC[last:].replace("outBiddingZone", "inBiddingZone").replace(
        ">B10<", ">B11<")
    assert parse(as_generation.encode())[0].gco2_kwh == pytest.approx(12_938_600 / 45_400)  # 284.99
    assert parse(DE_LU_DOC.encode())[0].gco2_kwh == pytest.approx(DE_LU_LAST)
    # whatever its production type: gas "consumed" is not gas generated
    body = a75(series("B14", NOON, "PT60M", [1000]), series("B04", NOON, "PT60M", [1000], direction="out"))
    reading, counts = parse(body)
    assert reading.gco2_kwh == 12.0 and counts["series_consumption"] == 1


def test_the_newest_partial_interval_is_not_used():
    """Gas (major) has not published 12:45 yet: the reading is 12:30-12:45, where every major
    type is reported, and says so with its period end (12:45)."""
    body = a75(series("B19", NOON, "PT15M", [18000, 19000, 19500, 20000]),
               series("B16", NOON, "PT15M", [4400, 4300, 4100, 4000]),
               series("B04", NOON, "PT15M", [5200, 5100, 5050]),
               series("B02", NOON, "PT60M", [8000]), series("B05", NOON, "PT60M", [3000]),
               series("B01", NOON, "PT60M", [4500]))
    reading, _ = parse(body)
    # 12:30-12:45: wind 19500×11 + solar 4100×48 + gas 5050×490 + lignite 8000×820 + coal 3000×820
    #   + biomass 4500×230 = 214,500 + 196,800 + 2,474,500 + 6,560,000 + 2,460,000 + 1,035,000
    #   = 12,940,800 / (19500 + 4100 + 5050 + 8000 + 3000 + 4500 = 44,150 MW) = 293.11
    assert reading.gco2_kwh == pytest.approx(12_940_800 / 44_150)
    assert reading.period_end == NOON + 45 * 60 and reading.estimated is False


def test_a_minor_type_missing_from_the_last_interval_marks_it_estimated():
    """Marine (10 MW, 0.02 % of the day: not major) stopped after 12:30: the last interval is
    used as it is (the same 290.27 as without marine) and marked estimated."""
    doc = DE_LU_DOC.replace("</GL_MarketDocument>", series("B13", NOON, "PT15M", [10, 10, None, None])
                            + "</GL_MarketDocument>")
    reading, _ = parse(doc.encode())
    assert reading.gco2_kwh == pytest.approx(DE_LU_LAST)
    assert reading.period_end == NOON + 3600 and reading.estimated is True


def test_variable_sized_blocks_hold_until_the_next_point():
    """curveType A03 leaves out points equal to the previous one: position 2 holds 1's value."""
    body = a75(series("B14", NOON, "PT15M", [40000, None, None, 38000], curve="A03"),
               series("B04", NOON, "PT15M", [4000, 4000, 4000, 4000]))
    reading, _ = parse(body)
    # 12:45: nuclear 38000×12 + gas 4000×490 = 456,000 + 1,960,000 = 2,416,000 / 42,000 MW = 57.52
    assert reading.gco2_kwh == pytest.approx(2_416_000 / 42_000)
    body = a75(series("B14", NOON, "PT15M", [40000, None, None, None], curve="A03"),
               series("B04", NOON, "PT15M", [4000, 4000, 4000, 4000]))
    assert parse(body)[0].gco2_kwh == pytest.approx((480_000 + 1_960_000) / 44_000)  # 40000 held to 13:00


def test_negative_quantities_are_clamped_and_nan_refused_and_both_counted():
    """Solar at night reports -5 MW (own use): clamped to 0. A NaN gas point at 12:45 is refused
    as not reported, so 12:45 lacks a major type and the reading is 12:30-12:45."""
    body = a75(series("B16", NOON, "PT15M", [-5, -4, -5, -6]),
               series("B04", NOON, "PT15M", [5000, 5000, 5200, "NaN"]),
               series("B14", NOON, "PT15M", [30000, 30000, 30000, 30000]),
               series("B19", NOON, "PT15M", ["1e400", 900, 1000, 1100]))
    reading, counts = parse(body)
    # 12:30: solar 0 + gas 5200×490 + nuclear 30000×12 + wind 1000×11 = 2,548,000 + 360,000 + 11,000
    #   = 2,919,000 / 36,200 MW = 80.64
    assert reading.gco2_kwh == pytest.approx(2_919_000 / 36_200)
    assert reading.period_end == NOON + 45 * 60
    assert counts["points_clamped"] == 4 and counts["points_refused"] == 2  # NaN, 1e400 (inf)


@pytest.mark.parametrize("body,message", [
    (b"<GL_MarketDocument xmlns='x'><TimeSeries>", "not well-formed XML"),
    (b"<html><body>Service Unavailable</body></html>", "expected a GL_MarketDocument, got html"),
    (b"Service Unavailable", "not an XML document"),
    (b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
     b"<GL_MarketDocument>&b;</GL_MarketDocument>", "declares a DTD"),
    (a75(), "no generation data"),
    (a75(series("B04", NOON, "PT15M", [0, 0, 0, 0])), "0 MW"),
    (acknowledgement(), "999: No matching data found for Data item ACTUAL_GENERATION"),
])
def test_documents_that_give_no_reading(body, message):
    with pytest.raises(SourceError, match=message):
        parse(body)


def test_unknown_types_other_units_and_bad_periods_are_skipped_and_counted():
    body = a75(series("B04", NOON, "PT15M", [5000] * 4), series("B25", NOON, "PT15M", [100] * 4),
               series("B14", NOON, "PT15M", [9] * 4, unit="KWH"),
               series("B05", NOON, "PT15M", [9] * 4).replace("PT15M", "P1D"))
    reading, counts = parse(body)
    assert reading.gco2_kwh == 490.0 and counts["series_skipped"] == 3


def test_points_outside_the_requested_window_are_not_used():
    body = a75(series("B04", NOON, "PT60M", [5000]), series("B14", NOON + 3600, "PT60M", [30000]))
    assert parse(body, window=(int(NOON) - 3600, int(NOON) + 3600))[0].gco2_kwh == 490.0


# ---- the tables ------------------------------------------------------------------------------
def test_every_eic_code_has_its_check_character():
    assert all(eic_is_valid(z.eic) for z in BIDDING_ZONES)
    assert not eic_is_valid("10Y1001A00000435")  # a guess for IE: its check character would be 6
    assert {z.key: z.eic for z in BIDDING_ZONES if z.key in ("FR", "DE-LU", "IE-SEM", "SE3", "IT-North")} == {
        "FR": FR, "DE-LU": DE_LU, "IE-SEM": "10Y1001A1001A59C", "SE3": "10Y1001A1001A46L",
        "IT-North": "10Y1001A1001A73I"}


def test_emission_factors_are_the_ipcc_medians_where_ipcc_has_them():
    ef = {code: t.gco2_kwh for code, t in PRODUCTION_TYPES.items()}
    assert sorted(ef) == [f"B{i:02d}" for i in range(1, 21)]
    assert (ef["B05"], ef["B04"], ef["B01"], ef["B16"], ef["B09"], ef["B11"], ef["B12"], ef["B14"], ef["B19"],
            ef["B18"], ef["B13"]) == (820, 490, 230, 48, 38, 24, 24, 12, 11, 12, 17)
    assert ef["B10"] is None  # pumped storage: left out of the mean
    assert all(t.source for t in PRODUCTION_TYPES.values())


def test_default_regions_cover_the_eu_cloud_regions():
    zones = entsoe.EntsoE("e").zones(DEFAULT_REGIONS)
    assert zones["eu-west-3"] == zones["europe-west9"] == zones["francecentral"] == zones["fr"] == FR
    assert zones["eu-central-1"] == zones["europe-west3"] == zones["germanywestcentral"] == zones["de"] == DE_LU
    assert zones["eu-west-1"] == zones["northeurope"] == "10Y1001A1001A59C"
    assert zones["eu-north-1"] == zones["swedencentral"] == "10Y1001A1001A46L"
    assert "eu-west-2" not in zones and "uksouth" not in zones  # GB: the gb_eso operator


# ---- the source, through the SourceManager -----------------------------------------------------
def serve_entsoe(endpoint, docs: dict[str, bytes | Route], token: str = TOKEN) -> None:
    """Answer /api like the Transparency Platform: 401 for another token, per in_Domain."""

    def dispatch(path: str) -> Route | None:
        url = urllib.parse.urlsplit(path)
        if url.path != "/api":
            return None
        q = dict(urllib.parse.parse_qsl(url.query))
        if q.get("securityToken") != token:
            return Route(b"<html><body><h1>HTTP Status 401 - Unauthorized</h1></body></html>", 401, "text/html")
        doc = docs.get(q.get("in_Domain", ""), acknowledgement())
        return doc if isinstance(doc, Route) else Route(doc, 200, "text/xml")

    endpoint.dispatch = dispatch


def entsoe_table(endpoint, **extra) -> dict:
    return {"grid_operator": {"operator": "entsoe", "base_url": endpoint.base, "api_key_env": "TEST_ENTSOE_TOKEN",
                              **extra}}


def manager(table: dict, at: float = NOON + 3600 + 20 * 60) -> tuple[SourceManager, ManualClock]:
    clock = ManualClock(at)  # 13:20, when the 12:00-13:00 hour has been published
    return SourceManager(parse_sources(table), clock=clock), clock


def test_one_request_per_bidding_zone_and_the_reading_per_region(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_ENTSOE_TOKEN", TOKEN)
    fr = a75(series("B14", NOON, "PT60M", [45000], zone=FR), series("B04", NOON, "PT60M", [3000], zone=FR))
    serve_entsoe(endpoint, {FR: fr, DE_LU: DE_LU_DOC.encode()})
    mgr, clock = manager(entsoe_table(endpoint, regions=["eu-west-3", "europe-west9", "francecentral",
                                                         "eu-central-1", "europe-west3"]))
    mgr.poll_all()
    live = mgr.current().live_intensity
    # FR 12:00-13:00: nuclear 45000×12 + gas 3000×490 = 540,000 + 1,470,000 = 2,010,000 / 48,000 MW = 41.875
    assert live["eu-west-3"].gco2_kwh == pytest.approx(2_010_000 / 48_000)
    assert live["europe-west9"] == live["francecentral"] == live["eu-west-3"]
    assert live["eu-central-1"].gco2_kwh == pytest.approx(DE_LU_LAST) and live["eu-central-1"].tag == "grid_operator_api"
    # the value is for 12:45-13:00 (DE-LU) and 12:00-13:00 (FR): both periods ended at 13:00
    assert live["eu-central-1"].taken_at == live["eu-west-3"].taken_at == NOON + 3600 < clock()
    queries = [dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(p).query)) for p, _ in endpoint.requests]
    assert sorted(q["in_Domain"] for q in queries) == [DE_LU, FR]  # five regions, two zones, two requests
    assert all(q["documentType"] == "A75" and q["processType"] == "A16" and q["securityToken"] == TOKEN
               for q in queries)
    # the last 24 hours up to the end of the current hour (13:20 -> 14:00)
    assert {(q["periodStart"], q["periodEnd"]) for q in queries} == {("202611291300", "202611301400")}
    assert mgr.health()["grid_operator"]["series_consumption"] == 1  # DE-LU's pumping series


@pytest.mark.parametrize("extra,bound", [({}, 7200.0), ({"max_signal_age_s": 5400}, 5400.0)])
def test_entsoe_readings_carry_their_own_two_hour_staleness_bound(endpoint, monkeypatch, extra, bound):
    """ENTSO-E publishes up to an hour late: at 14:25 the 12:00-13:00 hour is 85 minutes old, stale
    under the global 3600 s, so its readings carry 7200 s (or the source's own setting), and the
    scorer and the manager's health judge them by it."""
    from agent.score import live_ok

    monkeypatch.setenv("TEST_ENTSOE_TOKEN", TOKEN)
    fr = a75(series("B14", NOON, "PT60M", [45000], zone=FR), series("B04", NOON, "PT60M", [3000], zone=FR))
    serve_entsoe(endpoint, {FR: fr})
    mgr, clock = manager(entsoe_table(endpoint, regions=["eu-west-3"], **extra), at=NOON + 3600 + 85 * 60)
    mgr.poll_all()
    reading = mgr.current().live_intensity["eu-west-3"]
    assert (reading.max_age_s, clock() - reading.taken_at) == (bound, 85 * 60)
    assert live_ok(reading, clock(), mgr.current().max_signal_age_s)  # 5,100 s old, within the bound
    assert not live_ok(reading, reading.taken_at + bound + 1, 3600.0)
    gb = SourceManager(parse_sources({"grid_operator": {"operator": "gb_eso", "base_url": endpoint.base}}))
    assert gb.live[0].max_age_s is None  # other operators keep the global [sources] bound


def test_zone_map_takes_a_zone_name_or_an_eic_code(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_ENTSOE_TOKEN", TOKEN)
    serve_entsoe(endpoint, {FR: a75(series("B14", NOON, "PT60M", [1000], zone=FR)),
                            CZ: a75(series("B05", NOON, "PT60M", [1000], zone=CZ))})
    mgr, _ = manager(entsoe_table(endpoint, regions=["onprem-lyon", "onprem-prague"],
                                  zone_map={"onprem-lyon": "FR", "onprem-prague": CZ}))
    mgr.poll_all()
    live = mgr.current().live_intensity
    assert live["onprem-lyon"].gco2_kwh == 12.0 and live["onprem-prague"].gco2_kwh == 820.0


def test_configuration_mistakes_name_the_key():
    with pytest.raises(ConfigError, match="no ENTSO-E bidding zone known for region.*eu-west-2.*zone_map"):
        SourceManager.from_config({"grid_operator": {"operator": "entsoe", "regions": ["eu-west-2"]}})
    with pytest.raises(ConfigError, match=r"zone_map\['x'\] = '10Y1001A00000435' is neither a known bidding zone"):
        parse_sources({"grid_operator": {"operator": "entsoe", "zone_map": {"x": "10Y1001A00000435"}}})
    with pytest.raises(ConfigError, match="api_key_env: only operator = 'entsoe' takes them"):
        parse_sources({"grid_operator": {"operator": "gb_eso", "api_key_env": "X"}})


def test_a_missing_token_is_an_error_at_start_and_nothing_is_sent(endpoint, monkeypatch):
    monkeypatch.delenv("ENTSOE_SECURITY_TOKEN", raising=False)
    mgr = SourceManager.from_config({"grid_operator": {"operator": "entsoe", "base_url": endpoint.base,
                                                       "regions": ["eu-west-3"], "name": "eu-grid"}})
    with pytest.raises(ConfigError, match="grid_operator eu-grid: no ENTSO-E security token.*ENTSOE_SECURITY_TOKEN "
                                          "is not set.*transparency@entsoe.eu"):
        mgr.start()
    assert endpoint.requests == []


def test_a_refused_token_stops_the_start_without_showing_it(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_ENTSOE_TOKEN", "revoked-" + TOKEN)
    serve_entsoe(endpoint, {FR: DE_LU_DOC.encode()})
    mgr = SourceManager.from_config(entsoe_table(endpoint, regions=["eu-west-3"]))
    with pytest.raises(SourceStartError, match="refused the security token \\(HTTP 401\\): set a valid token in the "
                                               "environment variable TEST_ENTSOE_TOKEN") as info:
        mgr.start(first_poll_timeout_s=10)
    assert TOKEN not in str(info.value) and "securityToken=***" in str(info.value)
    assert any(TOKEN in p for p, _ in endpoint.requests)  # it was sent, and only to the API


def test_the_token_never_appears_in_errors_or_logs(endpoint, monkeypatch, caplog):
    """Every way a poll can fail, including a server that echoes the request line."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TEST_ENTSOE_TOKEN", TOKEN)
    quoted = urllib.parse.quote(TOKEN, safe="")
    echo = Route(b"", 502, "text/plain")
    serve_entsoe(endpoint, {FR: echo, DE_LU: Route(acknowledgement(), 400, "text/xml")})
    base_dispatch = endpoint.dispatch

    def echoing(path: str) -> Route | None:
        route = base_dispatch(path)
        return Route(f"bad gateway for GET {path}".encode(), 502, "text/plain") if route is echo else route

    endpoint.dispatch = echoing
    mgr, _ = manager(entsoe_table(endpoint, regions=["eu-west-3", "eu-central-1"]))
    mgr.poll_all()
    health = mgr.health()["grid_operator"]
    assert "HTTP 502" in health["last_error"] and "securityToken=***" in health["last_error"]
    assert "HTTP 400: 999: No matching data found" in health["last_error"]  # the reason, from the body
    unreachable, _ = manager({"grid_operator": {**entsoe_table(endpoint)["grid_operator"],
                                                "base_url": "http://127.0.0.1:9", "regions": ["eu-west-3"]}})
    unreachable.poll_all()
    errors = [health["last_error"], unreachable.health()["grid_operator"]["last_error"], caplog.text]
    assert all(TOKEN not in e and quoted not in e for e in errors)
    assert sum(TOKEN in p for p, _ in endpoint.requests) == 2


def test_an_oversized_answer_is_refused(endpoint, monkeypatch):
    monkeypatch.setenv("TEST_ENTSOE_TOKEN", TOKEN)
    monkeypatch.setattr(entsoe, "MAX_XML_BYTES", 4096)
    serve_entsoe(endpoint, {FR: a75(*[series("B14", NOON, "PT15M", [1000] * 4, zone=FR)] * 40)})
    mgr, _ = manager(entsoe_table(endpoint, regions=["eu-west-3"]))
    mgr.poll_all()
    assert "larger than 4096 bytes" in mgr.health()["grid_operator"]["last_error"]
    assert mgr.current().live_intensity == {}


# ---- RTE éCO2mix ---------------------------------------------------------------------------------
ECO2MIX_PATH = ("/api/explore/v2.1/catalog/datasets/eco2mix-national-tr/records"
                "?order_by=date_heure%20desc&limit=1&where=taux_co2%20is%20not%20null")


def eco2mix(*records: dict) -> bytes:
    """The ODRÉ Explore v2.1 answer for eco2mix-national-tr (a few of its fields)."""
    return orjson.dumps({"total_count": 35040 if records else 0, "results": [
        {"perimetre": "France", "nature": "Données temps réel", "date": r["date_heure"][:10],
         "heure": r["date_heure"][11:16], "date_heure": r["date_heure"], "consommation": 61234,
         "nucleaire": 48712, "gaz": 3410, "eolien": 5630, "solaire": 1204, "ech_physiques": -9870,
         "taux_co2": r["taux_co2"]} for r in records]})


def test_rte_eco2mix_latest_quarter_hour(endpoint):
    endpoint.set(ECO2MIX_PATH, eco2mix({"date_heure": "2026-11-30T12:45:00+00:00", "taux_co2": 23}),
                 content_type="application/json; charset=utf-8")
    mgr, clock = manager({"grid_operator": {"operator": "rte_eco2mix", "base_url": endpoint.base}})
    mgr.poll_all()
    live = mgr.current().live_intensity
    assert set(live) == {"fr", "eu-west-3", "europe-west9", "francecentral", "francesouth"}
    reading = live["eu-west-3"]
    assert reading.gco2_kwh == 23.0 and reading.tag == "grid_operator_api" and reading.estimated is False
    assert reading.taken_at == NOON + 3600  # 12:45 + 15 min, already past at 13:20
    assert [p for p, _ in endpoint.requests] == [ECO2MIX_PATH]


@pytest.mark.parametrize("body,message", [
    (eco2mix(), "no record with a taux_co2 value"),
    (eco2mix({"date_heure": "2026-11-30T12:45:00+00:00", "taux_co2": None}), "not a non-negative number"),
    (eco2mix({"date_heure": "yesterday", "taux_co2": 20}), "not an ISO 8601 time"),
    (b'{"error_code": "ODSQLError", "message": "Unknown field"}', "no `results` list"),
])
def test_rte_eco2mix_answers_without_a_value(endpoint, body, message):
    endpoint.set(ECO2MIX_PATH, body, content_type="application/json")
    mgr, _ = manager({"grid_operator": {"operator": "rte_eco2mix", "base_url": endpoint.base}})
    mgr.poll_all()
    assert mgr.current().live_intensity == {} and message in mgr.health()["grid_operator"]["last_error"]
