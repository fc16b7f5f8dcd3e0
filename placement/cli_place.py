"""``carbonspan place``: resolve a policy through the gate and place one job."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson

from placement.cli import RULES, read_json
from placement.formula import FormulaError
from placement.place import place
from placement.registry import UnknownPolicy

ENV_POLICY = "CARBONSPAN_PLACEMENT_POLICY"
EPILOG = """example:
  echo '{"id": "etl-7", "size": 2}' > job.json
  echo '[{"name": "a", "region": "DE", "carbon_intensity": 380, "cost_per_hour": 1.2,
          "capacity": 8, "used": 3},
         {"name": "b", "region": "FR", "carbon_intensity": 60, "cost_per_hour": 1.5,
          "capacity": 8, "used": 7}]' > clusters.json
  carbonspan place --job job.json --clusters clusters.json --policy carbon-aware
"""


def _handler(args: argparse.Namespace) -> int:
    policy = args.policy or os.environ.get(ENV_POLICY) or "carbon-aware"
    try:
        job = read_json(args.job, "job")
        clusters = read_json(args.clusters, "clusters")
        report = place(job, clusters, policy, audit_log=args.audit_log)
    except (ValueError, UnknownPolicy, FormulaError) as exc:
        print(f"carbonspan place: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        label = "job" if report["job"] is None else f"job {report['job']}"
        print(f"{label} -> cluster {report['cluster']} (region {report['region']})")
        print(report["reason"])
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "place",
        help="place one job through the policy gate",
        description="Resolve a placement policy through the R-ec/R-ed gate (probe, audit log, "
        "re-test cadence) and place one job on the best fitting cluster. The output says which "
        "policy actually ran and why.\n\n" + RULES,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--job", required=True, metavar="FILE", help="job JSON: {id, size?, ...}")
    p.add_argument("--clusters", required=True, metavar="FILE",
                   help="cluster list JSON: [{name, region, carbon_intensity|null, "
                   "cost_per_hour, capacity, used, ...}]")
    p.add_argument("--policy", metavar="NAME", help=f"policy name or YAML file "
                   f"(default ${ENV_POLICY} or carbon-aware)")
    p.add_argument("--audit-log", metavar="FILE", help="placement audit log to read evaluations from")
    p.add_argument("--json", action="store_true", help="print the placement report as JSON")
    p.set_defaults(func=_handler)
