"""Provenance end to end (issue 11, item 9): a real agent writes window lines whose methodology
names every region's intensity source, basis and vintage; ``carbonspan aggregate`` carries
those texts into the disclosure report and its HTML page, so no figure has an unstated source."""

from __future__ import annotations

import html
import signal
import subprocess
import sys

import orjson
from agent_process import REPO, AgentProcess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from agent.carbon import annual

KEYS = ["intensity_table", *(f"intensity_table_{key}" for key in annual.SOURCES)]


def test_the_report_names_source_basis_and_vintage_of_every_region(tmp_path):
    agent = AgentProcess(tmp_path / "archives", ["--window-seconds", "60"], {}, None)
    try:
        agent.wait_ready()
        provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{agent.http_url}/v1/traces")))
        tracer = provider.get_tracer("carbonspan-test")
        for region in ("eu-west-1", "us-west-2", "ap-northeast-2"):  # one region of each source
            with tracer.start_as_current_span("q", kind=SpanKind.CLIENT) as span:
                span.set_attributes({"db.system.name": "postgresql", "db.operation.name": "SELECT",
                                     "cloud.region": region})  # fmt: skip
        provider.shutdown()
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        if agent.proc.poll() is None:
            agent.kill9()
    lines = [rec["report"] for rec in agent.records()]
    meth = lines[0]["methodology"]
    assert "ember-2025" in meth["intensity_table"]
    assert "ie 255.9: eu-west-1," in meth["intensity_table_ember_2025"]
    assert "89 given for us-west-2" in meth["intensity_table_ccf_em_2023_2024"]
    assert "ap-northeast-2 490.82 (KR)" in meth["intensity_table_electricitymaps_2022_mean"]

    out, page = tmp_path / "report.json", tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "carbonspan", "aggregate", str(tmp_path / "archives"), "--from", "2000-01-01",
         "--to", "2199-12-31", "--out", str(out), "--html", str(page)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = orjson.loads(out.read_bytes())["methodology"]
    for key in KEYS:
        assert report["window_methodology"][key] == [meth[key]], key
        assert meth[key] in report["vintages"], key
    text = html.unescape(page.read_text())
    for key in KEYS:
        assert meth[key] in text, key
    assert "design notes ... year" not in text and "year is not stated" not in text
