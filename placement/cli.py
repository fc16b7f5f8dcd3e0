"""``carbonspan policy``: evaluate carbon-aware placement policies and show what the gate does.

    carbonspan policy evaluate NAME --trace grid.json [--record] [--json]
    carbonspan policy status NAME
    carbonspan policy list
    carbonspan policy sample [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from placement.audit import read_log, resolve_log_path
from placement.decision import (
    DEFAULT_MARGIN_PP,
    DEFAULT_RETIRE_BELOW_PCT,
    ENV_MARGIN,
    ENV_RETIRE,
    setting_text,
    settings_from_env,
)
from placement.evaluate import FORECAST_GREEDY, PERSISTENCE_HOURS
from placement.evaluation import evaluate_candidate, record_evaluation
from placement.formula import FormulaError
from placement.place import resolve
from placement.registry import UnknownPolicy, available
from placement.sample import sample_trace
from placement.trace import METHOD_BASIS, TraceError, parse_trace

EPILOG = """examples:
  carbonspan policy sample --out sample.json
  carbonspan policy evaluate forecast-greedy --trace sample.json
  carbonspan policy evaluate carbon-aware --trace grid.json --record --json
  carbonspan policy status carbon-aware
  carbonspan policy list
"""
BASIS_LABEL = {
    "accounting": "accounting-basis figure (average-mix intensities)",
    "decision": "decision figure (marginal intensities)",
}


def read_json(path: str, what: str) -> Any:
    """Load a JSON file or raise ValueError saying which file and what is wrong with it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{what} {path} is not valid JSON: {exc}") from None


def _print_json(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def _fail(msg: str, code: int = 2) -> int:
    print(f"carbonspan policy: error: {msg}", file=sys.stderr)
    return code


def _evaluate(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_env()
        trace = parse_trace(read_json(args.trace, "trace"))
        result, identity = evaluate_candidate(trace, args.name, settings)
    except (ValueError, TraceError, UnknownPolicy, FormulaError) as exc:
        return _fail(str(exc))
    recorded = None
    if args.record:
        try:
            recorded = record_evaluation(resolve_log_path(args.audit_log), trace, result, settings,
                                         identity=identity)
        except ValueError as exc:
            return _fail(str(exc), 1)
    if args.json:
        _print_json(result)
    else:
        _print_verdict(result)
    young = int((trace.submit < PERSISTENCE_HOURS).sum())
    if result["candidate"] == FORECAST_GREEDY and young:
        print(f"note: {young} of {len(trace.job_ids)} jobs are submitted before hour "
              f"{PERSISTENCE_HOURS}, with less than a day of history to forecast from; "
              "forecast-greedy runs them at once at home (as carbon-agnostic does)", file=sys.stderr)
    if recorded is not None:
        note = " (synthetic: recorded, but it never gates)" if result["trace"]["synthetic"] else ""
        print(f"recorded as audit event seq {recorded.seq} ({recorded.hash}){note}", file=sys.stderr)
    return 0


def _print_verdict(r: dict[str, Any]) -> None:
    t = r["trace"]
    basis = BASIS_LABEL[METHOD_BASIS[t["method"]]]
    print(f"trace {t['digest']}  method {t['method']}: {basis}"
          + ("  [SYNTHETIC]" if t["synthetic"] else ""))
    print(f"{'policy':<26} {'emissions kgCO2e':>18} {'reduction %':>12}")
    for name, v in r["policies"].items():
        print(f"{name:<26} {v['emissions_g'] / 1000:>18.3f} {v['reduction_pct']:>12.2f}")
    print(f"best simple baseline: {r['best_simple']}")
    print(f"candidate: {r['candidate']}  delta {r['delta_pp']:+.2f} pp  margin {setting_text(r['margin_pp'])} pp")
    print(f"oracle headroom: {r['policies']['oracle']['reduction_pct']:.2f} %")
    v = r["verdict"]
    print(f"verdict: {v['action']}: ships {v['ships']}: {v['reason']}")


def _status(args: argparse.Namespace) -> int:
    try:
        res = resolve(args.name, audit_log=args.audit_log)
    except (ValueError, UnknownPolicy, FormulaError) as exc:
        return _fail(str(exc))
    obj = res.objective()
    if args.json:
        _print_json(obj)
        return 0
    print(f"requested: {obj['requested']}   effective: {obj['effective']}   action: {obj['action']}"
          f"   gate: {obj['mode']}")
    print(obj["reason"])
    if obj["evidence"]:
        e = obj["evidence"]
        print(f"relies on audit event seq {e['seq']} ({e['hash']}) of {e['ts']}")
    if "would_have" in obj:
        print(f"enforce would: {obj['would_have']['reason']}")
    return 0


def _list(args: argparse.Namespace) -> int:
    log = read_log(resolve_log_path(args.audit_log))
    rows = [
        {"seq": r.seq, "hash": r.hash, "ts": r.ts, **{k: r.event.get(k) for k in
         ("policy", "policy_identity", "trace", "best_simple", "delta_pp", "margin_pp", "verdict")}}
        for r in log.evaluations
        if args.policy is None or r.event.get("policy") == args.policy
    ]
    if args.json:
        _print_json({"log": str(log.path), "problem": log.problem, "evaluations": rows})
    elif not rows and not log.problem:
        print(f"no recorded evaluations in {log.path}; run 'carbonspan policy evaluate NAME "
              "--trace FILE --record'")
    else:
        print(f"{'seq':>4} {'evaluated at':<28} {'policy':<20} {'trace':<10} {'delta pp':>9}  verdict")
        for r in rows:
            kind = "synthetic" if (r["trace"] or {}).get("synthetic") else (r["trace"] or {}).get("method")
            v = r["verdict"] or {}
            print(f"{r['seq']:>4} {r['ts']:<28} {r['policy']!s:<20} {kind!s:<10} "
                  f"{r['delta_pp'] or 0:>+9.2f}  {v.get('action')} -> {v.get('ships')}")
        print("policies: " + ", ".join(f"{n} ({o})" for n, o in sorted(available().items())))
    if log.problem:
        print(f"carbonspan policy: error: {log.problem}; the gate treats it as holding no "
              "evaluation (fail closed)", file=sys.stderr)
        return 1
    return 0


def _sample(args: argparse.Namespace) -> int:
    data = orjson.dumps(sample_trace()) + b"\n"
    if args.out:
        try:
            Path(args.out).write_bytes(data)
        except OSError as exc:
            return _fail(f"cannot write {args.out}: {exc.strerror}", 1)
        print(f"wrote synthetic sample trace to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(data.decode())
    return 0


def _add_log(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audit-log", metavar="FILE", help="placement audit log (default: "
                   "$CARBONSPAN_PLACEMENT_AUDIT_LOG or ~/.local/state/carbonspan/placement-audit.jsonl)")


#: what R-ec and R-ed mean, in both commands' --help (docs/placement.md, "The decision (R-ec)
#: and retirement (R-ed)")
RULES = (f"R-ec: a carbon-aware policy places on carbon only if it beats the better simple baseline by "
         f"the margin ({ENV_MARGIN}, default {DEFAULT_MARGIN_PP:g} pp) in a current measurement.\n"
         f"R-ed: if what ships reduces emissions by less than {ENV_RETIRE} (default "
         f"{DEFAULT_RETIRE_BELOW_PCT:g} %), carbon is taken out of placement. See docs/placement.md.")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "policy",
        help="evaluate and gate carbon-aware placement policies",
        description="Measure a carbon-aware placement policy against simple baselines on a "
        "workload and intensity trace (R-ec), record the verdict in a hash-chained audit log, "
        "and show what the runtime gate lets placement do.\n\n" + RULES,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", required=True)
    fmt = argparse.RawDescriptionHelpFormatter
    ev = sub.add_parser(
        "evaluate", help="evaluate a candidate policy on a trace", formatter_class=fmt,
        description="Score carbon-agnostic, lowest-average-region, threshold-shift, the "
        "candidate and the oracle on the trace; print every policy's emissions and reduction, "
        "the best simple baseline, delta, margin, oracle headroom and what ships.",
        epilog="example:\n  carbonspan policy evaluate carbon-aware --trace grid.json --record",
    )
    ev.add_argument("name", metavar="NAME", help="forecast-greedy or a placement provider")
    ev.add_argument("--trace", required=True, metavar="FILE", help="trace JSON")
    ev.add_argument("--record", action="store_true", help="append the verdict to the audit log")
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_log(ev)
    ev.set_defaults(func=_evaluate)
    st = sub.add_parser(
        "status", help="what placement will do now with NAME, and why", formatter_class=fmt,
        description="Probe NAME and apply the gate to the recorded evaluations, as "
        "'carbonspan place' would.",
        epilog="example:\n  carbonspan policy status carbon-aware --json",
    )
    st.add_argument("name", metavar="NAME")
    st.add_argument("--json", action="store_true")
    _add_log(st)
    st.set_defaults(func=_status)
    ls = sub.add_parser(
        "list", help="recorded evaluations", formatter_class=fmt,
        description="List the R-ec evaluations in the audit log; exits 1 if its chain is broken.",
        epilog="example:\n  carbonspan policy list --policy carbon-aware",
    )
    ls.add_argument("--policy", metavar="NAME", help="only this policy's evaluations")
    ls.add_argument("--json", action="store_true")
    _add_log(ls)
    ls.set_defaults(func=_list)
    sa = sub.add_parser(
        "sample", help="write the synthetic demonstration trace", formatter_class=fmt,
        description="A synthetic trace (three regions with daily solar dips, 60 jobs); "
        "evaluations over it are recorded as synthetic and never gate.",
        epilog="example:\n  carbonspan policy sample --out sample.json",
    )
    sa.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    sa.set_defaults(func=_sample)
