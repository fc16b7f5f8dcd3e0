"""R-ec (does the carbon-aware candidate earn its complexity?) and R-ed (retirement).

Let π* be the better simple baseline and Δ = reduction(candidate) − reduction(π*) in
percentage points. The candidate ships if Δ ≥ m, else π* ships. If what ships reduces
emissions by less than r % against carbon-agnostic, carbon-aware placement is retired.
Both tests are decided on the figures as the verdict prints them: each reduction rounded to
0.01 pp (half to even, on the float's exact value, which is what ``f"{x:.2f}"`` does), Δ the
exact decimal difference of two such figures, and m and r as written (their shortest
decimal form). So a verdict never says "+5.00 pp ... short of the margin 5 pp". A
measurement older than the re-test cadence licenses nothing. The rule follows the finding of
Sukprasert et al. (EuroSys 2024) that simple policies capture most of the achievable
reduction and that the benefit shrinks as grids get greener: complexity has to pay for itself,
and keep paying.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from placement.evaluate import ORACLE, SIMPLE_BASELINES
from placement.trace import Trace

ENV_MARGIN = "CARBONSPAN_CARBON_POLICY_MARGIN_PP"
ENV_RETIRE = "CARBONSPAN_CARBON_POLICY_RETIRE_BELOW_PCT"
ENV_RETEST = "CARBONSPAN_CARBON_POLICY_RETEST_DAYS"
DEFAULT_MARGIN_PP = 5.0
DEFAULT_RETIRE_BELOW_PCT = 2.0
DEFAULT_RETEST_DAYS = 90.0

SHIP_CANDIDATE = "ship-candidate"
SHIP_BASELINE = "ship-baseline"
RETIRE = "retire"
EVENT_TYPE = "r-ec-evaluation"
CENT = Decimal("0.01")  # the precision verdicts print reductions and Δ at


def printed(pct: float) -> Decimal:
    """A reduction (or Δ) exactly as the verdict prints it: ``f"{pct:.2f}"`` as a Decimal."""
    return Decimal(pct).quantize(CENT, rounding=ROUND_HALF_EVEN)


def as_written(x: float) -> Decimal:
    """A setting as its shortest decimal form (5.0 -> 5.0, 0.1 -> 0.1, not 0.1000…055)."""
    return Decimal(repr(float(x)))


def setting_text(x: float) -> str:
    """A setting printed exactly as it is decided on (``5`` for 5.0, ``0.1``, ``5.0000001``)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True)
class Settings:
    margin_pp: float = DEFAULT_MARGIN_PP
    retire_below_pct: float = DEFAULT_RETIRE_BELOW_PCT
    retest_days: float = DEFAULT_RETEST_DAYS


def _env_number(env: Mapping[str, str], key: str, default: float, positive: bool) -> float:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not a number; set it to e.g. {default:g}") from None
    # a negative margin would let a candidate that loses to the baseline ship; a negative
    # retirement threshold or cadence means nothing: refuse them rather than guess
    if value != value or value in (float("inf"), float("-inf")) or value < 0 or (positive and value == 0):
        raise ValueError(f"{key}={raw!r} must be a finite number {'> 0' if positive else '>= 0'}")
    return value


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Margin, retirement threshold and re-test cadence from the environment (or defaults)."""
    env = os.environ if env is None else env
    return Settings(
        _env_number(env, ENV_MARGIN, DEFAULT_MARGIN_PP, positive=False),
        _env_number(env, ENV_RETIRE, DEFAULT_RETIRE_BELOW_PCT, positive=False),
        _env_number(env, ENV_RETEST, DEFAULT_RETEST_DAYS, positive=True),
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    best_simple: str
    delta_pp: float
    ships: str
    action: str
    reason: str


def decide(
    policies: Mapping[str, Mapping[str, float]], candidate: str, settings: Settings
) -> Verdict:
    """Apply R-ec then R-ed to one evaluation's figures."""
    red = {n: printed(float(v["reduction_pct"])) for n, v in policies.items()}
    best = max(SIMPLE_BASELINES, key=lambda n: red[n])  # ties -> the first listed
    delta = red[candidate] - red[best]  # exact: both are whole hundredths
    m, r = settings.margin_pp, settings.retire_below_pct
    if delta >= as_written(m):
        ships, action = candidate, SHIP_CANDIDATE
        why = f"{candidate} beats {best} by {delta:.2f} pp >= margin {setting_text(m)} pp"
    else:
        ships, action = best, SHIP_BASELINE
        why = f"{candidate} is {delta:+.2f} pp against {best}, short of the margin {setting_text(m)} pp"
    headroom = f"oracle headroom {red[ORACLE]:.2f} %"
    if red[ships] < as_written(r):
        return Verdict(
            best, float(delta), ships, RETIRE,
            f"{why}; {ships} reduces emissions by only {red[ships]:.2f} % "
            f"< {setting_text(r)} %: carbon-aware placement is retired "
            f"(placement stops using carbon); {headroom}",
        )
    return Verdict(best, float(delta), ships, action, f"{why}; {ships} ships; {headroom}")


def result_json(
    trace: Trace,
    policies: Mapping[str, Mapping[str, float]],
    candidate: str,
    verdict: Verdict,
    settings: Settings,
) -> dict[str, Any]:
    """The ``policy evaluate --json`` document, exactly the issue's keys."""
    return {
        "trace": {"digest": trace.digest, "method": trace.method, "synthetic": trace.synthetic},
        "policies": {
            n: {"emissions_g": v["emissions_g"], "reduction_pct": v["reduction_pct"]}
            for n, v in policies.items()
        },
        "best_simple": verdict.best_simple,
        "candidate": candidate,
        "delta_pp": verdict.delta_pp,
        "margin_pp": settings.margin_pp,
        "verdict": {"ships": verdict.ships, "action": verdict.action, "reason": verdict.reason},
    }


def audit_event(
    result: Mapping[str, Any], trace: Trace, settings: Settings, evaluated_at: str
) -> dict[str, Any]:
    """The audit-log event for a recorded evaluation (everything the gate and an auditor need)."""
    return {
        "type": EVENT_TYPE,
        "policy": result["candidate"],
        "trace": {**result["trace"], "basis": trace.basis, "jobs": len(trace.job_ids)},
        "policies": result["policies"],
        "best_simple": result["best_simple"],
        "delta_pp": result["delta_pp"],
        "margin_pp": result["margin_pp"],
        "retire_below_pct": settings.retire_below_pct,
        "verdict": result["verdict"],
        "evaluated_at": evaluated_at,
    }
