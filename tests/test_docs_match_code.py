"""The reference docs name everything the code accepts or exposes, so they cannot drift.

Every list below is derived from the code, never from the docs:

- configuration keys: the ``[green]`` dataclasses and parser key tuples (``agent/config.py``),
  the ``[agent]`` settings dataclasses (``agent/daemon_config.py``) and the ``[sources]``
  pydantic models walked through ``model_fields`` (``agent/sources/config.py``);
- command-line flags: the parser ``carbonspan.cli.build_parser()`` builds, walked action by
  action through every subcommand;
- Prometheus metrics: the collectors of a fresh ``agent.metrics.AgentMetrics`` registry;
- report fields: ``schema.report.DisclosureReport`` and ``schema.models.ArchiveLine`` walked
  through ``model_fields``, plus the window line's counter names and methodology keys.

A name counts as documented when it is a whole identifier inside a Markdown inline code span
(`` `name` ``, or a token of one such as `` `window{start, end}` ``) in the right place: a row of
the reference table for configuration keys and metrics, or a table row / paragraph that also
names the field's parents for report fields. A failure says what is missing and in which file
(and table) to add it. Where the docs have a reference table, names the table holds that the
code does not know fail too (a removed setting must leave the docs with it).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", re.M | re.S)
# an inline code span; it may wrap onto the next line, never past a blank line
SPAN = re.compile(r"(?<!`)`(?!`)((?:[^`\n]|\n(?![ \t]*\n))+?)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")

#: Deliberately undocumented names, as (doc file, dotted name) for report fields or
#: ("cli", "--flag") for flags. Keep it short and say why for each entry. Empty today: every
#: name the code accepts or exposes is documented. (argparse's own -h/--help is never
#: checked; README says "--help on each has an example".)
UNDOCUMENTED: frozenset[tuple[str, str]] = frozenset()


# -- reading the docs -------------------------------------------------------------------------


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def spans(text: str) -> list[str]:
    """Inline code spans, outside fenced code blocks."""
    return SPAN.findall(FENCE.sub("", text))


def code_tokens(text: str) -> set[str]:
    return {tok for span in spans(text) for tok in IDENT.findall(span)}


def section(text: str, heading: str, doc: str) -> str:
    """From the heading line containing ``heading`` to the next heading of its level or higher."""
    m = re.search(rf"^(#+) [^\n]*{re.escape(heading)}[^\n]*$", text, re.M)
    assert m, f"{doc}: no heading containing {heading!r} (the reference section moved?)"
    end = re.compile(rf"^#{{1,{len(m[1])}}} ", re.M).search(text, m.end())
    return text[m.start() : end.start() if end else len(text)]


def rows(text: str) -> list[list[str]]:
    """Table rows as lists of cells (header and separator rows dropped; ``\\|`` is no split)."""
    out = []
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    for i, line in enumerate(lines):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        if i + 1 < len(lines) and re.fullmatch(r"\|?[\s|:-]+\|?", lines[i + 1]):
            continue  # a header row: the next line is the separator
        out.append(cells)
    return out


def units(text: str) -> list[str]:
    """Table rows one by one, and paragraphs (blocks between blank lines) without code fences."""
    out = []
    for block in re.split(r"\n[ \t]*\n", FENCE.sub("", text)):
        table = [ln for ln in block.splitlines() if ln.startswith("|")]
        prose = [ln for ln in block.splitlines() if not ln.startswith("|")]
        out += table
        if prose:
            out.append("\n".join(prose))
    return out


def documented_with_parents(doc: str, text: str, parents: tuple[str, ...], name: str) -> bool:
    """``name`` in a code span of a table row or paragraph that also names every parent."""
    if (doc, ".".join((*parents, name))) in UNDOCUMENTED:
        return True
    for unit in units(text):
        if name in code_tokens(unit) and set(parents) <= set(IDENT.findall(unit)):
            return True
    return False


def code_text(text: str) -> str:
    """Everything in code: fenced blocks, inline spans and 4-space indented lines."""
    fenced = "\n".join(m[0] for m in FENCE.finditer(text))
    indented = "\n".join(ln for ln in FENCE.sub("", text).splitlines() if ln.startswith("    "))
    return "\n".join([fenced, indented, *spans(text)])


# -- walking the code -------------------------------------------------------------------------


def submodels(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic models inside an annotation (``X``, ``list[X]``, ``X | None``, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in submodels(arg)]


def model_fields(
    model: type[BaseModel], parents: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(parents, field)`` for every field of ``model`` and of the models nested in it."""
    for name, info in model.model_fields.items():
        yield parents, name
        for sub in submodels(info.annotation):
            yield from model_fields(sub, (*parents, name))


def shown(value: Any) -> str:
    """A default as the reference tables write it in a code span."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | Path):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def default_in(cell: str, value: Any) -> bool:
    if value is None:
        return "none" in cell.lower() or "—" in cell
    if isinstance(value, int | float) and not isinstance(value, bool):
        return re.search(rf"(?<![\w.]){re.escape(shown(value))}(?![\w.])", cell) is not None
    return f"`{shown(value)}`" in cell or (isinstance(value, str) and f"`{value}`" in cell)


# -- [green]: docs/carbon-model.md, the configuration table of section 9 ----------------------


def test_every_green_key_is_in_the_carbon_model_table() -> None:
    from agent import config

    doc = "docs/carbon-model.md"
    table = rows(section(read(doc), "Configuration and `carbonspan score`", doc))
    by_key = {}
    for cells in table:
        for tok in code_tokens(cells[0]) - {"green"}:
            by_key[tok] = cells
    top = [f.name for f in dataclasses.fields(config.GreenConfig)]
    host = [f.name for f in dataclasses.fields(config.HostConfig)]
    assert set(top) == set(config._GREEN_KEYS) and set(host) == set(config._HOST_KEYS), (
        "the [green] parser's key tuples and GreenConfig/HostConfig disagree"
    )
    missing = [k for k in top if k not in by_key]
    assert not missing, f"add a row to the [green] table of {doc} (section 9) for: {missing}"
    unknown = sorted(set(by_key) - set(top))
    assert not unknown, f"{doc} [green] table names keys the parser refuses: {unknown}"
    hosts_row = by_key["hosts"]
    missing = [k for k in host if k not in code_tokens(" | ".join(hosts_row))]
    assert not missing, f"add to the `[[green.hosts]]` row of {doc} (section 9): {missing}"

    wrong = []
    for f in dataclasses.fields(config.GreenConfig):
        if f.default is dataclasses.MISSING or isinstance(f.default, tuple):
            continue  # tables and arrays: empty by default
        if not default_in(by_key[f.name][1], f.default):
            wrong.append(f"{f.name} (code: {shown(f.default)}, doc: {by_key[f.name][1]!r})")
    for f in dataclasses.fields(config.HostConfig):
        if f.default not in (dataclasses.MISSING, 0.0) and not default_in(hosts_row[1], f.default):
            wrong.append(f"hosts {f.name} (code: {shown(f.default)})")
    assert not wrong, f"wrong defaults in the [green] table of {doc}: {wrong}"


# -- [agent]: docs/operations.md, "Configuration reference" -----------------------------------

#: Defaults computed when the agent starts, as the table words them.
RUNTIME_DEFAULTS = {("agent", "agent_id"): "host name"}


def agent_settings() -> list[tuple[str, str, Any, str]]:
    """``(table, key, default, env var)`` for every ``[agent]`` setting and sub-table key."""
    from agent.daemon_config import AgentSettings

    base, out = AgentSettings(), []
    for f in dataclasses.fields(AgentSettings):
        value = getattr(base, f.name)
        if dataclasses.is_dataclass(value):
            for g in dataclasses.fields(value):
                env = f"CARBONSPAN_{f.name}_{g.name}".upper()
                out.append((f"agent.{f.name}", g.name, getattr(value, g.name), env))
        else:
            out.append(("agent", f.name, value, f"CARBONSPAN_{f.name}".upper()))
    return out


def agent_table() -> dict[tuple[str, str], list[str]]:
    doc = "docs/operations.md"
    table = rows(section(read(doc), "Configuration reference", doc))
    out = {}
    for cells in table:
        m = re.search(r"`\[(agent(?:\.\w+)?)\]", cells[0])
        assert m, f"{doc} configuration table: row without an [agent...] key: {cells[0]!r}"
        for key in code_tokens(cells[0]) - set(m[1].split(".")):
            out[(m[1], key)] = cells
    return out


def test_every_agent_setting_is_in_the_operations_table() -> None:
    from agent.daemon_config import env_names

    doc = "docs/operations.md"
    settings = agent_settings()
    assert sorted(env for *_, env in settings) == sorted(env_names())
    table = agent_table()
    missing = [f"[{t}] {k}" for t, k, _, _ in settings if (t, k) not in table]
    assert not missing, f"add a row to the 'Configuration reference' table of {doc} for: {missing}"
    known = {(t, k) for t, k, _, _ in settings}
    gone = sorted(f"[{t}] {k}" for t, k in table if (t, k) not in known)
    assert not gone, f"{doc} configuration table lists settings the agent refuses: {gone}"
    wrong = []
    for t, k, default, env in settings:
        key, default_cell, env_cell = table[(t, k)][:3]
        if f"`{env}`" not in env_cell:
            wrong.append(f"[{t}] {k}: env column lacks `{env}`")
        expected = RUNTIME_DEFAULTS.get((t, k))
        ok = default_cell == expected if expected else default_in(default_cell, default)
        if not ok:
            wrong.append(f"[{t}] {k}: default column {default_cell!r}, code {shown(default)}")
    assert not wrong, f"fix the configuration table of {doc}: {wrong}"


def test_every_agent_flag_is_in_its_settings_row() -> None:
    doc = "docs/operations.md"
    table = agent_table()
    agent = dict(cli_options())[("agent",)]
    flags = {}
    for action in agent:
        if action.dest == "config":  # the file itself, not a setting
            continue
        key = ("agent.archive", "dir") if action.dest == "archive_dir" else ("agent", action.dest)
        assert key in table, f"--{action.dest}: no setting [{key[0]}] {key[1]} in {doc}"
        flags[key] = action.option_strings
    wrong = [f"{flag} in the row of [{t}] {k}" for (t, k), opts in flags.items()
             for flag in opts if f"`{flag}`" not in table[(t, k)][3]]
    assert not wrong, f"add to the flag column of {doc}'s configuration table: {wrong}"
    listed = {flag for cells in table.values() for flag in FLAG.findall(cells[3])}
    real = {flag for opts in flags.values() for flag in opts}
    assert listed <= real, f"{doc} lists flags `carbonspan agent` lacks: {sorted(listed - real)}"


# -- [sources]: docs/energy-sources.md, "Configuration reference: [sources]" ------------------


def sources_keys() -> dict[str, dict[str, Any]]:
    """kind -> {field: default}; kind ``"[sources]"`` for the table's own keys."""
    from agent.sources.config import SourcesConfig

    out: dict[str, dict[str, Any]] = {"[sources]": {}}
    for name, info in SourcesConfig.model_fields.items():
        models = submodels(info.annotation)
        if not models:
            out["[sources]"][name] = info.default
            continue
        (model,) = models
        out[name] = {k: v.default for k, v in model.model_fields.items()}
    return out


def test_every_sources_key_is_in_the_energy_sources_table() -> None:
    doc = "docs/energy-sources.md"
    table = rows(section(read(doc), "Configuration reference: `[sources]`", doc))
    keys = sources_keys()
    kinds = [k for k in keys if k != "[sources]"]

    def row_kinds(where: str) -> list[str]:
        words = set(IDENT.findall(where))
        if words == {"sources"}:
            return ["[sources]"]
        return kinds if "all" in words else [k for k in kinds if k in words]

    documented: dict[tuple[str, str], list[str]] = {}
    for cells in table:
        for kind in row_kinds(cells[1]):
            for key in code_tokens(cells[0]):
                documented[(kind, key)] = cells
    missing = [f"{key} ({kind})" for kind, fields in keys.items() for key in fields
               if (kind, key) not in documented]
    assert not missing, (
        f"add to the [sources] reference table of {doc} (a row naming the key, with the kind "
        f"or 'all' in its 'where' column): {missing}"
    )
    gone = sorted(f"{key} ({kind})" for kind, key in documented if key not in keys[kind])
    assert not gone, f"{doc} [sources] table lists keys the models refuse: {gone}"
    # defaults of the settings every source shares: one figure, or "kind N" for each kind
    wrong = []
    from agent.sources.config import PollSettings

    for key in PollSettings.model_fields:
        defaults = {kind: keys[kind][key] for kind in kinds}
        if any(isinstance(d, str) for d in defaults.values()):
            continue  # name: derived from the kind, described in words
        cell = documented[(kinds[0], key)][2]
        if len(set(defaults.values())) == 1:
            ok = re.match(rf"{re.escape(shown(defaults[kinds[0]]))}(?![\w.])", cell)
            wrong += [] if ok else [f"{key}: {cell!r}, code {shown(defaults[kinds[0]])}"]
        else:
            wrong += [f"{key} {kind}: code {shown(d)}" for kind, d in defaults.items()
                      if not re.search(rf"\b{kind} {re.escape(shown(d))}(?![\w.])", cell)]
    assert not wrong, f"wrong defaults in the [sources] table of {doc}: {wrong}"


# -- the command line: each command's flags in its own doc ------------------------------------

#: Where each subcommand is documented ("" is `carbonspan` itself).
CLI_DOCS = {
    "": "README.md",
    "score": "docs/carbon-model.md",
    "agent": "docs/operations.md",
    "demo": "README.md",
    "backfill": "docs/archive-format.md",
    "aggregate": "docs/report-format.md",
    "verify": "docs/auditors-guide.md",
    "keys": "docs/auditors-guide.md",
    "witness": "docs/auditors-guide.md",
    "calibrate": "docs/energy-sources.md",
    "policy": "docs/placement.md",
    "place": "docs/placement.md",
    "admit": "docs/admission.md",
    "simulate": "docs/simulation.md",
    "shadow": "docs/contracts.md",
    "run": "docs/contracts.md",
}


def cli_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub)command's parser by its path, e.g. ``("policy", "evaluate")``."""
    from carbonspan.cli import build_parser

    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        out[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return out


def cli_options() -> list[tuple[tuple[str, ...], list[argparse.Action]]]:
    """Each command's options, without argparse's own -h/--help."""
    return [(path, [a for a in p._actions
                    if a.option_strings and not isinstance(a, argparse._HelpAction)])
            for path, p in cli_parsers().items()]


def test_every_subcommand_is_built_and_mapped_to_a_doc() -> None:
    from carbonspan.cli import SUBCOMMANDS

    parsers = cli_parsers()
    for name in SUBCOMMANDS:
        p = parsers[(name,)]
        built = p.get_default("func") is not None or any(
            isinstance(a, argparse._SubParsersAction) for a in p._actions
        )
        assert built, f"`carbonspan {name}` did not register (import error?): cannot walk its flags"
        assert name in CLI_DOCS, f"new subcommand {name!r}: document it and map it in CLI_DOCS"
    missing = [n for n in SUBCOMMANDS if f"`carbonspan {n}" not in read("README.md")]
    assert not missing, f"add to the command table of README.md: {missing}"


def test_every_cli_flag_is_documented() -> None:
    missing = []
    for path, actions in cli_options():
        doc = CLI_DOCS[path[0] if path else ""]
        code = code_text(read(doc))
        command = " ".join(("carbonspan", *path))
        if path and command not in code:
            missing.append(f"{doc}: `{command}`")
        for action in actions:
            for flag in (o for o in action.option_strings if o.startswith("--")):
                if ("cli", flag) in UNDOCUMENTED:
                    continue
                if flag not in FLAG.findall(code):
                    missing.append(f"{doc}: `{command} {flag}`")
    assert not missing, f"document these commands/flags (in code: `...` or a code block): {missing}"


def invocations(text: str) -> Iterator[list[str]]:
    """Each ``carbonspan ...`` command written in the docs' code, as words."""
    lines: list[str] = []
    for block in [m[0] for m in FENCE.finditer(text)] + [code_text(FENCE.sub("", text))]:
        for line in block.splitlines():
            if lines and (lines[-1].endswith("\\") or re.match(r"\s+[\[-]", line)):
                lines[-1] = lines[-1].rstrip("\\") + " " + line.strip()
            else:
                lines.append(line)
    for line in lines:
        for part in re.split(r";|&&|\|\||\|(?=\s)", line.split(" # ")[0]):
            m = re.search(r"(?<![\w/.-])carbonspan((?:\s+\S+)*)", part)
            if m:
                yield m[1].split()


def test_documented_flags_exist() -> None:
    parsers = cli_parsers()
    wrong = []
    for doc in ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))):
        for words in invocations(read(doc)):
            if words and words[0].endswith(":"):  # a message, `carbonspan run: ...`, names run's flags
                words = [words[0][:-1], *words[1:]]
            path: tuple[str, ...] = ()
            while words and (*path, words[0]) in parsers:
                path, words = (*path, words[0]), words[1:]
            real = {o for p in (parsers[path[:i]] for i in range(len(path) + 1))
                    for a in p._actions for o in a.option_strings}
            for flag in (f for w in words for f in FLAG.findall(w)):
                if flag not in real:
                    wrong.append(f"{doc}: `carbonspan {' '.join(path)} {flag}`")
    assert not wrong, f"the docs show flags the commands do not have: {sorted(set(wrong))}"


# -- metrics: docs/operations.md, the table under "Metrics" -----------------------------------


def test_every_metric_is_in_the_operations_table() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from agent.metrics import AgentMetrics

    doc = "docs/operations.md"
    metrics = AgentMetrics()
    metrics.worker_on(0, 2, "a-w0", 0)  # a worker's own (agent/workers.py), documented too
    metrics.publisher_on()  # a worker's reading of the supervisor's [sources] (sources/shared.py)
    labels = {w._name: tuple(w._labelnames) for w in vars(metrics).values()
              if isinstance(w, MetricWrapperBase)}
    exposed = {}
    for family in metrics.registry.collect():
        assert family.name in labels, f"{family.name}: not an AgentMetrics attribute"
        name = family.name + ("_total" if family.type == "counter" else "")
        exposed[name] = (family.type, set(labels[family.name]))
    # with --workers N, each answer adds how whole it is (agent/metrics_share.py)
    import tempfile

    from prometheus_client.parser import text_string_to_metric_families

    from agent.metrics_share import RESERVED, MetricsShare

    with tempfile.TemporaryDirectory() as d:
        merged = MetricsShare(Path(d), 0, 2, "1", metrics.exposition).exposition().decode()
    for family in text_string_to_metric_families(merged):
        if family.name in RESERVED:
            exposed[family.name] = (family.type, {k for s in family.samples for k in s.labels})
    assert {"carbonspan_worker_metrics_up", "carbonspan_worker_metrics_age_seconds"} <= set(exposed)
    table = {}
    for cells in rows(section(read(doc), "Metrics (`GET /metrics`)", doc)):
        m = re.fullmatch(r"`(\w+)(?:\{([\w,]*)\})?`", cells[0])
        assert m, f"{doc} metrics table: first cell is not `name{{labels}}`: {cells[0]!r}"
        table[m[1]] = (cells[1], set(filter(None, (m[2] or "").split(","))))
    missing = sorted(set(exposed) - set(table))
    assert not missing, f"add a row to the metrics table of {doc} for: {missing}"
    gone = sorted(set(table) - set(exposed))
    assert not gone, f"{doc} metrics table lists metrics the agent does not expose: {gone}"
    wrong = [f"{n}: doc {table[n]}, code {v}" for n, v in exposed.items() if table[n] != v]
    assert not wrong, f"fix the type or {{labels}} in the metrics table of {doc}: {wrong}"


# -- report fields ----------------------------------------------------------------------------


def test_every_disclosure_report_field_is_in_report_format() -> None:
    from schema.report import DisclosureReport

    doc = "docs/report-format.md"
    text = read(doc)
    missing = [".".join((*parents, name)) for parents, name in model_fields(DisclosureReport)
               if not documented_with_parents(doc, text, parents, name)]
    assert not missing, (
        f"document these report fields in {doc} (a code span in a paragraph or table row that "
        f"also names the parent fields): {missing}"
    )


def window_counter_names() -> set[str]:
    """Every counter a window line's ``report.counters`` can hold, read from the agent's code."""
    from agent.otlp.rules import COUNTER_NAMES

    names = set(COUNTER_NAMES)
    pattern = re.compile(r'bump\(\s*\w+,\s*"(\w+)"|counters\["(\w+)"\]|\.reject\("(\w+)"\)')
    for path in (ROOT / "agent").rglob("*.py"):
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            names.add(m[1] or m[2] or m[3])
    return names


def test_every_window_line_field_is_in_archive_format() -> None:
    from agent.carbon.partial import WindowPartial
    from agent.config import Config
    from agent.score import ScoringContext
    from agent.window import build_report
    from schema.models import ArchiveLine

    doc = "docs/archive-format.md"
    text = read(doc)
    missing = [".".join((*parents, name)) for parents, name in model_fields(ArchiveLine)
               if not documented_with_parents(doc, text, parents, name)]
    assert not missing, (
        f"add these window line fields to the 'Window report fields' table of {doc}: {missing}"
    )
    counters = window_counter_names()
    assert {"spans_rejected", "region_overflow", "host_measured_fallback"} <= counters
    missing = sorted(c for c in counters
                     if not documented_with_parents(doc, text, ("report", "counters"), c))
    assert not missing, f"add these counters to the 'Counters' paragraph of {doc}: {missing}"
    report = build_report(WindowPartial.empty(), ScoringContext.from_config(Config()), 0, 0)
    missing = sorted(k for k in report.methodology
                     if not documented_with_parents(doc, text, ("report", "methodology"), k))
    assert not missing, f"add these keys to the 'Methodology keys' paragraph of {doc}: {missing}"


# -- the matcher itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, parents, name, expected",
    [
        ("`window{start, end}` of the `report`", ("report", "window"), "end", True),
        ("`root_span` only", (), "root_spans", False),  # whole identifiers, not prefixes
        ("**aggregate** — `windows`", ("aggregate",), "windows", True),
        ("`windows`\n\n**aggregate**", ("aggregate",), "windows", False),  # another paragraph
        ("| `a.b` | x |\n| `c` | y |", ("a",), "c", False),  # another table row
        ("```\n`c` in a fence\n```", (), "c", False),
        ("a span that\n`wraps {x,\ny}` a line", (), "y", True),
    ],
)
def test_the_matcher(text: str, parents: tuple[str, ...], name: str, expected: bool) -> None:
    assert documented_with_parents("t.md", text, parents, name) is expected


# -- --workers N: one /metrics and one live page (agent/metrics_share.py) ---------------------


def test_the_workers_sharing_numbers_in_operations_are_the_codes() -> None:
    from agent import metrics_share as ms

    def n(x: float) -> str:
        return f"{x:g}"

    assert ms.SHARE_S == 1.0 and ms.WARN_EVERY_S == 60.0  # said in words below
    text = " ".join(read("docs/operations.md").split())
    stated = [
        "every second (`SHARE_S`)",
        "once a minute per worker and reason",
        f"at most {n(ms.SCRAPE_WAIT_S)} s (`SCRAPE_WAIT_S`)",
        f"over {n(ms.PUBLISH_LATE_S)} s old (`PUBLISH_LATE_S`)",
        f"over {n(ms.STALE_AFTER_S)} s old (`STALE_AFTER_S`",
        f"dated over {n(ms.FUTURE_S)} s ahead",
        f"over {ms.MAX_METRICS_BYTES >> 10} KiB",
        f"over {ms.MAX_SERIES:,} samples",
        f"under {n(ms.WANTED_S)} s old (`WANTED_S`)",
        f"every {n(ms.LIVE_S)} s (`LIVE_S`",
        f"over {n(ms.LIVE_STALE_S)} s old (`LIVE_STALE_S`)",
        f"{ms.LIVE_SERVICES} services of most carbon (`LIVE_SERVICES`)",
        f"over {ms.MAX_LIVE_BYTES >> 20} MiB",
        f"more than {ms.MAX_RECENT} archived reports",
        f"lists over {ms.LIVE_SERVICES + 1} services",
        f"`{ms.MORE}`",
    ]
    missing = [phrase for phrase in stated if phrase not in text]
    assert not missing, f"docs/operations.md does not say (or says otherwise): {missing}"
