"""``carbonspan simulate evaluate``: a timeshift policy against its carbon-agnostic reference
and simple baselines, with capacity limits (the simulation), as docs/placement.md's R-ec asks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register_evaluate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", type=Path, help="OpenDC2 experiment JSON")
    parser.add_argument("--policy", required=True, help="the timeshift policy to evaluate (its name)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--record", action="store_true", help="write the evaluation to the placement audit log")
    parser.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    print("carbonspan simulate evaluate: not available yet", file=sys.stderr)
    return 2


def _unused(_: Any) -> None:
    return None
