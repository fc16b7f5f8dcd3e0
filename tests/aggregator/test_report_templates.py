"""The HTML report's Jinja2 templates: loaded from the package, autoescaped everywhere an
archive string lands (service, region, agent and organisation names are untrusted), and
holding nothing that is fetched or run."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from jinja2 import PackageLoader, UndefinedError

import aggregator
from aggregator import synth
from aggregator.compare import from_report
from aggregator.html_templates import environment, render
from aggregator.read import Period
from aggregator.render_html import render_html
from aggregator.report import build_report
from tests.aggregator.conftest import T0

HOSTILE = "x\"'><script>alert(1)</script><b onclick='y'>&amp;</b><!--"
TEMPLATES = Path(aggregator.__file__).parent / "templates"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.comments = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [k for k, _ in attrs]

    def handle_comment(self, data):
        self.comments += 1


def _hostile_report(tmp_path, fold):
    """A service, a region, an agent and an organisation named HOSTILE, compared with a
    previous day where another service was named HOSTILE too."""
    svcs = [synth.Svc(HOSTILE, region="pl"), synth.Svc("api", region="pl")]
    for day, root in ((0, "prev"), (1, "now")):
        reps = [synth.window_report(T0 + timedelta(days=day, minutes=i), svcs, agent_id=HOSTILE, embodied_g=0.1)
                for i in range(3)]
        synth.write_agent(tmp_path / root, "agent-a", [synth.sealed_lines(reps)], day=f"2026111{day}")
    previous = build_report(fold(tmp_path / "prev", period=Period.parse("2026-11-10", "2026-11-10")),
                            Period.parse("2026-11-10", "2026-11-10"), HOSTILE)
    period = Period.parse("2026-11-11", "2026-11-11")
    report = build_report(fold(tmp_path / "now", period=period), period, HOSTILE, previous=from_report(previous))
    report.regions[0].region = HOSTILE
    report.regions[0].intensity_source = HOSTILE
    report.integrity.chains[0].agent = HOSTILE
    report.aggregate.temporal_coverage_by_agent[0].agent = HOSTILE
    return report


def test_every_archive_string_is_escaped_wherever_a_template_puts_it(tmp_path, fold):
    report = _hostile_report(tmp_path, fold)
    page = render_html(report, "2026-12-02T09:00:00Z")
    parsed = _Tags()
    parsed.feed(page)
    assert "script" not in parsed.tags and "onclick" not in parsed.attrs
    assert parsed.comments == 0  # "<!--" never opened a comment
    assert HOSTILE not in page
    text = unescape(page)
    for where in ("<h1>Carbon disclosure: ", '<td class="name" title="', "<title>", '<td>'):
        assert where + HOSTILE in text, where  # the name whole, as text, in each kind of place
    # the table, the bars' tooltip, the series legend, the comparison, the region chart and
    # table, the chains and coverage tables, the title and the heading, the legend's title
    assert text.count(HOSTILE) >= 12


def test_the_templates_come_from_the_package_and_fetch_or_run_nothing():
    env = environment()
    assert isinstance(env.loader, PackageLoader) and env.autoescape is True
    names = sorted(p.name for p in TEMPLATES.iterdir())
    assert set(env.list_templates()) == set(names) and "report.html" in names
    for path in TEMPLATES.iterdir():
        body = path.read_text(encoding="utf-8")
        assert "<script" not in body and "@import" not in body and "url(" not in body, path.name
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", body), path.name
    with pytest.raises(UndefinedError):  # a name the renderer forgot fails, never prints as nothing
        render("bars.html", rows=[{"y": 0}], width=1, height=1, label_x=0, bar_x=0, bar_h=1, note="")
