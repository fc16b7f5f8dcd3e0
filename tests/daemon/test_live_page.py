"""``GET /``: the agent's live page, rendered in a real headless Chromium.

A real agent takes spans from the OpenTelemetry SDK's OTLP/HTTP exporter; Chromium loads the
page from it; the rendered DOM must list every service of the open window and of the archived
ones, the page must load nothing from outside, a screenshot must not be blank, and with auth
on the page is behind the same token as ingest. With a live Electricity Maps source polling
a loopback server (the API's real answer, then 500), the page shows the source ok and fresh
with its last success time and age, then failing and stale with the error.

Chromium is Debian's ``chromium`` package, which ``.ci/run`` installs and then sets
``CARBONSPAN_REQUIRE_BROWSER=1``: in CI a missing browser fails these tests. Elsewhere
without Chromium they are skipped with a reason that says so (``pytest -rs`` lists it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("CARBONSPAN_REQUIRE_BROWSER"):
    raise RuntimeError("CARBONSPAN_REQUIRE_BROWSER is set but no chromium is on PATH: "
                       "apt-get install chromium")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="NOT RUN: no chromium on PATH (apt-get install chromium; CI installs it)")

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--hide-scrollbars"]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    return subprocess.run([CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _send(agent, services: list[str]) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    for service in services:
        provider = TracerProvider(resource=Resource.create(
            {"service.name": service, "cloud.region": "eu-west-3"}))
        provider.add_span_processor(SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces", timeout=10)))
        tracer = provider.get_tracer("live-page-test")
        with tracer.start_as_current_span("GET /", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("SELECT", kind=SpanKind.CLIENT, attributes={
                    "db.system": "postgresql", "db.statement": "SELECT 1"}):
                pass
        provider.shutdown()


@needs_browser
def test_the_live_page_shows_the_open_and_archived_windows_in_a_browser(start_agent, tmp_path):
    agent = start_agent("--window-seconds", "2")
    _send(agent, ["archived-svc"])
    deadline = time.monotonic() + 60
    while not agent.records() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert agent.records(), "no window was archived"
    _send(agent, ["open-svc"])
    # a span the agent refuses (no valid trace id) must show under "Refused or ignored input"
    bad = (b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
           b'{"stringValue":"bad-svc"}}]},"scopeSpans":[{"spans":[{"traceId":"not-hex","spanId":'
           b'"00000000000000a1","name":"q","kind":3,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}')
    urllib.request.urlopen(urllib.request.Request(
        f"{agent.http_url}/v1/traces", data=bad, headers={"Content-Type": "application/json"}),
        timeout=10).read()

    dom = chromium(tmp_path, "--dump-dom", f"{agent.http_url}/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert "<title>carbonspan agent test-agent</title>" in text
    # open-svc may already be archived too when a window closed in between: it is on the page
    # either way; archived-svc is in the archived tables
    recent = text[text.index("archived windows, per service"):]
    assert "archived-svc" in recent and "open-svc" in text
    assert re.search(r"<td>archived-svc</td><td class=\"n\">[0-9.e+-]+</td>", recent)
    assert "state: ready" in text
    assert '<meta http-equiv="refresh" content="5">' in text  # refreshed periodically
    rejected = text[text.index("Refused or ignored input"):]
    assert re.search(r'<td>trace_id_invalid</td><td class="n">1</td>', rejected), rejected[:500]
    # self-contained: nothing is loaded from anywhere
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<script" not in text

    shot, blank = tmp_path / "page.png", tmp_path / "blank.png"
    for path, url in ((shot, f"{agent.http_url}/"), (blank, "about:blank")):
        proc = chromium(tmp_path, f"--screenshot={path}", "--window-size=1200,900", url)
        assert proc.returncode == 0 and path.is_file(), proc.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[16:24] == (1200).to_bytes(4, "big") + (
        900).to_bytes(4, "big")
    assert len(png) > 3 * len(blank.read_bytes()), "the screenshot is as empty as a blank page"


def test_the_live_page_is_behind_the_ingest_token(start_agent, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    agent = start_agent(config=f'[agent.auth]\ntoken_file = "{token}"\n')
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{agent.http_url}/", timeout=10)
    assert refused.value.code == 401
    assert "Bearer" in refused.value.headers["WWW-Authenticate"]
    ok = urllib.request.urlopen(urllib.request.Request(
        f"{agent.http_url}/", headers={"Authorization": "Bearer s3cret"}), timeout=10)
    assert ok.status == 200 and ok.headers["Content-Type"].startswith("text/html")
    assert b"no spans in the open window yet" in ok.read()
    # health stays outside auth, as the probes need
    assert urllib.request.urlopen(f"{agent.http_url}/healthz", timeout=10).status == 200


_EM_KEY = "live-page-key"


def _em_answer(state: dict[str, int]):
    """Electricity Maps v3 ``/v3/carbon-intensity/latest``, as tests/sources/test_intensity.py
    serves it (the documented answer), or 500 once ``state["status"]`` says so."""
    def answer(path: str, headers) -> tuple[int, str, bytes]:
        if state["status"] != 200:
            return state["status"], "application/json", b'{"error": "internal server error"}'
        if headers.get("auth-token") != _EM_KEY or "zone=FR" not in path:
            return 401, "application/json", b'{"error": "unauthorised"}'
        now = datetime.now(UTC)
        iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.000Z")  # noqa: E731
        return 200, "application/json", json.dumps({
            "zone": "FR", "carbonIntensity": 41.0, "datetime": iso(now),
            "updatedAt": iso(now), "createdAt": iso(now), "emissionFactorType": "lifecycle",
            "isEstimated": False, "estimationMethod": None}).encode()
    return answer


def _sources_row(tmp_path: Path, agent) -> list[str]:
    dom = chromium(tmp_path, "--dump-dom", f"{agent.http_url}/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    section = dom.stdout[dom.stdout.index("<h2>Sources</h2>"):]
    section = section[:section.index("</table>")]
    assert "<th>last success</th>" in section and "<th>signal</th>" in section, section
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", section)
    assert len(rows) == 1, section
    return re.split(r'</td><td(?: class="n")?>', rows[0])


@needs_browser
def test_the_live_page_shows_a_live_sources_freshness_and_its_failure(
        start_agent, loopback_http, tmp_path):
    state = {"status": 200}
    base = loopback_http(_em_answer(state))
    # polled every second; a reading is stale 4 s after the feed last confirmed it
    agent = start_agent(
        env={"TEST_EM_KEY": _EM_KEY},
        config=f'[green]\ndefault_region = "eu-west-3"\n[sources]\nmax_signal_age_s = 4\n'
               f'[sources.electricity_maps]\nbase_url = "{base}"\napi_key_env = "TEST_EM_KEY"\n'
               f'regions = ["eu-west-3"]\ninterval_s = 1\n')
    agent.wait_for(lambda: agent.metric("carbonspan_source_up") >= 1, timeout=15,
                   what="the Electricity Maps source to poll successfully")

    name, up, since, failures, signal, error = _sources_row(tmp_path, agent)
    assert (name, up, failures, signal, error) == ("electricity_maps", "ok", "0", "fresh", "-")
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \((\d+) s ago\)", since)
    assert m, since
    at = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - at).total_seconds()) < 30 and int(m[2]) < 30

    state["status"] = 500
    agent.wait_for(lambda: agent.metric("carbonspan_source_up") == 0 and agent.metric(
        "carbonspan_source_failures") >= 1 or None, timeout=30, what="a failed poll")
    deadline = time.monotonic() + 30
    while True:  # stale once the last reading is older than max_signal_age_s
        name, up, since_failed, failures, signal, error = _sources_row(tmp_path, agent)
        if signal == "stale" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert (name, up, signal) == ("electricity_maps", "failing", "stale")
    assert int(failures) >= 1
    assert "500" in error, error
    # the last success is the one before the failures, now older
    later = re.fullmatch(r"(\S+Z) \((\d+) s ago\)", since_failed)
    assert later and later[1] >= m[1] and int(later[2]) >= 3, since_failed
    assert agent.stop() == 0
