"""deploy/grafana/carbonspan-dashboard.json: every metric and label its PromQL names is one a
real agent exposes (after archiving windows with spans, with a [sources] table and the signal
log on), or, for the workload-contract row (``carbonspan_contract_*``), one that `carbonspan run
--metrics` and `carbonspan shadow run --metrics` really write."""

from __future__ import annotations

import json
import re

from .conftest import DASHBOARD

# Labels the scrape adds (Prometheus' target labels and the usual Kubernetes relabelling).
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "node"}
# What the dashboard must show (the metrics its panels are built from).
REQUIRED = {
    "carbonspan_service_carbon_gco2_total", "carbonspan_service_energy_kwh_total",
    "carbonspan_carbon_gco2_total", "carbonspan_energy_kwh_total",
    "carbonspan_grid_intensity_gco2_per_kwh",
    "carbonspan_spans_accepted_total", "carbonspan_spans_rejected_total",
    "carbonspan_requests_total", "carbonspan_queue_depth", "carbonspan_queue_capacity",
    "carbonspan_wal_fsyncs_total", "carbonspan_windows_written_total",
    "carbonspan_last_window_end_seconds",
    "carbonspan_source_up", "carbonspan_source_signal_age_seconds",
    "carbonspan_signal_log_rows_total", "carbonspan_signal_log_errors_total",
}
#: The workload-contract row (docs/contracts.md, "Metrics"): every metric the commands write.
REQUIRED_CONTRACT = {
    "carbonspan_contract_decisions_total", "carbonspan_contract_deferral_minutes_bucket",
    "carbonspan_contract_deadline_slack_minutes", "carbonspan_contract_signal_staleness_minutes",
    "carbonspan_contract_kill_switch",
}
CONTRACT_PREFIX = "carbonspan_contract_"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_RANGE = re.compile(r"\[[^\]]*\]")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"bool", "and", "or", "unless", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}


def parse_promql(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric name -> label names in its matchers, labels of by/without/on/ignoring clauses).

    Enough PromQL for dashboards: strings, ranges and Grafana variables are blanked first;
    an identifier followed by "(" is a function or aggregation, any other is a metric name.
    """
    text = _STRING.sub('""', expr)
    text = _RANGE.sub("", text)
    text = _VARIABLE.sub("", text)
    metrics: dict[str, set[str]] = {}

    def selector(m: re.Match) -> str:
        labels = set(_MATCHER.findall(m.group(2)))
        name = m.group(1)
        if name is None:  # {__name__="..."} or a bare matcher: not used by this dashboard
            raise AssertionError(f"selector without a metric name in {expr!r}")
        metrics.setdefault(name, set()).update(labels - {"__name__"})
        return f" {name} "

    text = _SELECTOR.sub(selector, text)
    grouping: set[str] = set()
    for labels in _GROUPING.findall(text):
        grouping |= {x.strip() for x in labels.split(",") if x.strip()}
    text = _GROUPING.sub(" ", text)
    for m in _IDENT.finditer(text):
        word = m.group(0)
        if word.lower() in _KEYWORDS or text[m.end():].lstrip().startswith("("):
            continue
        metrics.setdefault(word, set())
    return metrics, grouping


def test_the_parser_reads_what_it_should() -> None:
    metrics, grouping = parse_promql(
        'sum by (service) (rate(carbonspan_service_carbon_gco2_total{instance=~"$instance", '
        'term="a{b}"}[$__rate_interval])) * 3600 / on(instance) group_left up '
        "+ time() - x_bucket offset 5m")
    assert metrics == {"carbonspan_service_carbon_gco2_total": {"instance", "term"}, "up": set(),
                       "x_bucket": set()}
    assert grouping == {"service", "instance"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def queries(dash: dict) -> list[tuple[str, str, str]]:
    """(where, expression, legend) of every PromQL query: panel targets and query variables."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"], t.get("legendFormat", "")))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, q
            out.append((f"variable {v['name']}", f"{m.group(1)}{{{m.group(2)}=\"\"}}", ""))
    return out


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_variable() -> None:
    dash = dashboard()
    assert dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    (ds,) = [v for v in variables.values() if v["type"] == "datasource"]
    assert ds["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": f"${{{ds['name']}}}"}
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        assert set(p["gridPos"]) == {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["datasource"] == ref and p["targets"], p["title"]
            assert all(t["datasource"] == ref for t in p["targets"])
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == ref


def test_every_metric_and_label_in_the_dashboard_is_exposed_by_a_real_agent(live, contract_metrics) -> None:
    seen: set[str] = set()
    problems = []
    for where, expr, legend in queries(dashboard()):
        metrics, grouping = parse_promql(expr)
        assert metrics, f"{where}: no metric in {expr!r}"
        available = set(TARGET_LABELS)
        for name, labels in metrics.items():
            seen.add(name)
            # sample name -> label names: the live agent's /metrics, or the contract commands' files
            contract = name.startswith(CONTRACT_PREFIX)
            exposed = contract_metrics if contract else live.sample_labels
            if name not in exposed:
                problems.append(f"{where}: {name} is not a sample name of "
                                + ("the --metrics files of carbonspan run / shadow run" if contract
                                   else "the agent's /metrics"))
                continue
            available |= exposed[name]
            for label in labels - exposed[name] - TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {label!r}")
        for label in grouping - available:
            problems.append(f"{where}: grouping by {label!r}, which no metric of it has")
        legend_labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        if legend_labels and grouping:
            for label in legend_labels - grouping:
                problems.append(f"{where}: legend {{{{{label}}}}} is aggregated away")
    assert problems == [], "\n".join(problems)
    assert REQUIRED <= seen, f"panels missing for {sorted(REQUIRED - seen)}"
    assert REQUIRED_CONTRACT <= seen, f"contract panels missing for {sorted(REQUIRED_CONTRACT - seen)}"


def test_the_contract_row_reads_only_the_contract_files_and_the_agent_rows_only_the_agent() -> None:
    """The contract metrics come through node_exporter, whose `instance` is not an agent's: a
    panel mixing them with agent metrics, or filtering them by the Agent variable, shows nothing."""
    for where, expr, _ in queries(dashboard()):
        names = set(parse_promql(expr)[0])
        contract = {n for n in names if n.startswith(CONTRACT_PREFIX)}
        assert not contract or contract == names, f"{where} mixes contract and agent metrics: {expr}"
        if contract:
            assert "$instance" not in expr, f"{where}: contract metrics are not the agent's; drop the $instance filter"
            _, grouping = parse_promql(expr)
            assert "job" not in grouping, f"{where}: `job` is the scrape job; the contract is the label `contract`"

