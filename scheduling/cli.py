"""``carbonspan simulate``: run OpenDC experiment files; ``explain`` one placement decision."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

EPILOG = """\
examples:
  # from a checkout, ready to run (~10 s): OpenDC's surf_week on 277 SURF hosts in NL and in BE,
  # Mem against Timeshift with every task deferrable
  carbonspan simulate run scheduling/data/opendc/quickstart/experiment.json --out results/
  carbonspan simulate run experiment.json --out results/
  carbonspan simulate run experiment.json --json --compat opendc
  carbonspan simulate run experiment.json --engine dask --scheduler tcp://127.0.0.1:8786
  carbonspan simulate explain --policy policy.json --hosts hosts.json --task task.json --seed 7
  carbonspan simulate evaluate experiment.json --policy Timeshift --record

EXPERIMENT.json is an OpenDC2 experiment (topologies, workloads, allocationPolicies,
exportModels); see docs/simulation.md. `carbonspan simulate EXPERIMENT.json` is short for
`carbonspan simulate run EXPERIMENT.json`.
"""


class _AnyAction(dict):
    """The action table; argparse's choice check lets any first word through (see below)."""

    lenient = False  # set once every action is registered

    def __contains__(self, key: object) -> bool:
        return self.lenient or dict.__contains__(self, key)


class _DefaultRun(argparse._SubParsersAction):
    """``simulate X.json ...`` means ``simulate run X.json ...``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = _AnyAction()
        self.choices = self._name_parser_map

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        if values and values[0] not in dict.keys(self._name_parser_map):
            values = ["run", *values]
        super().__call__(parser, namespace, values, option_string)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate a cluster from OpenDC experiment files (energy, carbon, shifting)",
        description="Simulate OpenDC-style experiments: placement policies, hosts running several "
        "tasks, power models, energy and carbon, carbon-aware time-shifting with a deadline guard.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=lambda _a: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="simulate_command", metavar="ACTION", action=_DefaultRun)
    run = _action(sub, "run", "run every scenario of an experiment and print the summary table")
    run.add_argument("experiment", type=Path, help="OpenDC2 experiment JSON")
    run.add_argument("--out", type=Path, help="write per-scenario parquet folders here "
                     "(default: the experiment's outputFolder)")
    run.add_argument("--json", action="store_true", help="print the summaries as one JSON document")
    run.add_argument("--compat", choices=["opendc"], help="reproduce OpenDC's own choices (docs/simulation.md)")
    run.add_argument("--engine", choices=["local", "dask"], default="local",
                     help="run scenarios one after another (local) or in parallel on Dask")
    run.add_argument("--scheduler", help="Dask scheduler address (default: an in-process cluster)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.set_defaults(func=cmd_run)
    ex = _action(sub, "explain", "which host a policy picks for one task, and why")
    ex.add_argument("--policy", required=True, type=Path, help="allocation policy JSON (as in an experiment)")
    ex.add_argument("--hosts", required=True, type=Path, help="topology JSON, optionally with a 'state' list")
    ex.add_argument("--task", required=True, type=Path, help="task JSON: cpuCount, cpuCapacity, memory, ...")
    ex.add_argument("--seed", type=int, default=0, help="the scenario seed (subset draws)")
    ex.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ex.set_defaults(func=cmd_explain)
    from scheduling.evaluate import register_evaluate

    register_evaluate(_action(sub, "evaluate", "the placement gate's evaluation of a timeshift policy"))
    sub.choices.lenient = True


def _action(sub: Any, name: str, summary: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                          epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)


def _fail(msg: str) -> int:
    print(f"carbonspan simulate: {msg}", file=sys.stderr)
    return 2


def _progress(enabled: bool):
    if not enabled:
        return None, None
    from rich.progress import Progress

    bar = Progress(transient=True, redirect_stdout=False)
    state: dict[str, Any] = {}

    def update(done: int, total: int, label: str) -> None:
        if "task" not in state:
            bar.start()
            state["task"] = bar.add_task("scenarios", total=total)
        bar.update(state["task"], completed=done, description=label[:40])

    return update, bar


def cmd_run(args: argparse.Namespace) -> int:
    import scheduling
    from scheduling.experiment import load_experiment
    from scheduling.outputs import render_summary
    from scheduling.topology import SpecError

    try:
        exp = load_experiment(args.experiment, compat=args.compat == "opendc")
    except SpecError as exc:
        return _fail(f"{args.experiment}: {exc}")
    out = args.out or (args.experiment.parent / exp.output_folder / exp.name)
    update, bar = _progress(not args.no_progress and not args.json and sys.stderr.isatty())
    try:
        results = scheduling.simulate(args.experiment, compat=args.compat == "opendc", engine=args.engine,
                                      scheduler=args.scheduler, out=out, progress=update)
    except (SpecError, ValueError, OSError) as exc:
        return _fail(str(exc))
    finally:
        if bar is not None:
            bar.stop()
    summaries = [r.summary for r in results]
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({"experiment": exp.name, "output": str(out),
                                              "scenarios": summaries}, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_summary(summaries), end="")
        print(f"outputs: {out}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from scheduling.explain import explain_files
    from scheduling.topology import SpecError

    try:
        report = explain_files(args.policy, args.hosts, args.task, args.seed)
    except (SpecError, ValueError, OSError) as exc:
        return _fail(str(exc))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    from scheduling.explain import render

    print(render(report), end="")
    return 0
