"""The words of the verdicts: why a claim is denied, and what a pending claim waits for.

Kept apart from the engine so the rules read as rules. Every message names the pool, the
figures in µJ or devices, and what would change the answer (trio/httpx tone).
"""

from __future__ import annotations

from admission.claims import Claim, Verdict
from admission.model import Pool


def denied(pool: Pool, claim: Claim, e: int, e_est: int, d: int, who: str) -> Verdict:
    """Step 1 (impossibility): the claim, or a gang's total in ``pool``, can never fit."""
    if d > pool.devices:
        reason = (
            f"{who}asks for {d} devices but pool '{pool.name}' guarantees {pool.devices}; "
            "devices are not lent between pools: ask for fewer or raise the guarantee"
        )
    elif e_est > pool.guarantee_uj:
        reason = (
            f"{who}an estimator (unmeasured) estimate of {e_est} µJ exceeds pool "
            f"'{pool.name}' (its whole guarantee is {pool.guarantee_uj} µJ), and rule 1 forbids "
            "borrowing on a guess: measure the workload or raise the guarantee"
        )
    else:
        reason = (
            f"{who}{e} µJ exceeds the most pool '{pool.name}' can ever hold in one window "
            f"({pool.ceiling_uj} µJ: guarantee plus its whole weighted share of the surplus); "
            "split the work or raise the guarantee"
        )
    return Verdict(claim.id, "denied", reason, claim.grade, "impossibility", devices=claim.devices)


def gang_never_fits(claim: Claim, gang: str, pool: str, need: int, cap: int, root: bool) -> Verdict:
    """Step 1 for a gang as a whole: even with every other pool idle, it overfills ``pool``."""
    why = (
        "its whole window budget (surplus never crosses roots)" if root
        else "guarantee plus weighted share of the surplus, shrunk by the gang's own use of its "
        "siblings' guarantees"
    )
    reason = (
        f"gang '{gang}' (all members): needs {need} µJ under pool '{pool}', which can never hold "
        f"more than {cap} µJ in one window even with every other pool idle ({why}); split the "
        "gang or raise the guarantees"
    )
    return Verdict(claim.id, "denied", reason, claim.grade, "impossibility", devices=claim.devices)


def _pending(claim: Claim, reason: str, step: str, waits_for: str) -> Verdict:
    return Verdict(claim.id, "pending", reason, claim.grade, step, devices=claim.devices, waits_for=waits_for)


def wait_devices(pool: Pool, claim: Claim, who: str) -> Verdict:
    short = claim.devices - (pool.devices - pool.devices_used)
    return _pending(
        claim, f"{who}not enough free devices", "devices",
        f"{short} more devices in pool '{pool.name}' ({pool.devices_used} of {pool.devices} in use)",
    )


def wait_reclaim(pool: Pool, claim: Claim, over: tuple[Pool, int], who: str) -> Verdict:
    x, cap = over
    return _pending(
        claim, f"{who}borrowers hold what this pool's own guarantee needs, and it cannot be "
        "reclaimed (already spent)", "guarantee",
        f"{x.used_uj + claim.estimate_uj - cap} µJ under pool '{x.name}' "
        "(borrowers' releases or the window rollover)",
    )


def wait_own_guarantee(pool: Pool, claim: Claim, remaining: int, who: str) -> Verdict:
    return _pending(
        claim, f"{who}an estimator claim may only use its own pool's remaining guarantee (rule 1)",
        "guarantee",
        f"{claim.estimate_uj - remaining} µJ to be freed in pool '{pool.name}' "
        f"({max(remaining, 0)} of its own {pool.guarantee_uj} µJ guarantee is left; "
        "releases or the window rollover)",
    )


def wait_surplus(claim: Claim, over: tuple[Pool, int], who: str) -> Verdict:
    x, cap = over
    if x.parent is not None:
        why = f"beyond the weighted share of the surplus (rule 6): pool '{x.name}' may hold {cap} µJ now"
    else:
        why = f"the window budget of root pool '{x.name}' ({cap} µJ) is taken; surplus never crosses roots"
    return _pending(
        claim, who + why, "borrowing",
        f"{x.used_uj + claim.estimate_uj - cap} µJ under pool "
        f"'{x.parent.name if x.parent else x.name}' (releases or the window rollover)",
    )
