"""Idle and full-load power per cloud instance type, for the ``cloud_specpower`` estimate.

Cloud Carbon Footprint (CCF, cloudcarbonfootprint.org, "Methodology: Compute", coefficients
derived from the SPECpower_ssj2008 results database, 2021 edition) gives minimum and maximum
watts per vCPU by CPU microarchitecture: Cascade Lake 0.64/3.97, Skylake 0.65/4.26,
Broadwell 0.71/3.69, Haswell 1.90/6.01, AMD EPYC 2nd gen 0.47/1.69, AWS Graviton2
0.47/1.69, and fleet averages AWS 0.74/3.5, GCP 0.71/4.26, Azure 0.78/3.76. An instance's
row is the per-vCPU figure times its vCPUs. ``m5.large`` and ``generic`` are the figures of
carbonspan issue 5 (m5.large 1.4/8.1 W, close to CCF's Skylake x 2 vCPU = 1.30/8.52 W;
generic 3.0/20.0 W per vCPU, a deliberately high figure for unknown hardware).

Like CCF, this covers the CPU: memory, storage and network are not in these watts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InstancePower:
    idle_w: float
    max_w: float
    per_vcpu: bool  # the figures are per vCPU: multiply by the configured ``vcpus``
    source: str
    vintage: str


def interpolate_watts(idle_w: float, max_w: float, cpu: float | None) -> float:
    """W = idle + (max - idle) x cpu, cpu in [0, 1] clamped; unknown utilisation -> idle.

    The linear model is CCF's (and SPECpower's load-line simplification).
    interpolate_watts(2, 20, 0.5) = 2 + 18 x 0.5 = 11 W.
    """
    if cpu is None or cpu != cpu:  # None or NaN
        return idle_w
    return idle_w + (max_w - idle_w) * min(1.0, max(0.0, cpu))


_CCF = "Cloud Carbon Footprint per-vCPU coefficients (SPECpower_ssj2008)"


def _ccf(arch: str, vcpus: int, lo: float, hi: float) -> InstancePower:
    return InstancePower(
        round(lo * vcpus, 3), round(hi * vcpus, 3), False, f"{_CCF}, {arch} x {vcpus} vCPU", "2021"
    )


INSTANCE_POWER: dict[str, InstancePower] = {
    "m5.large": InstancePower(
        1.4,
        8.1,
        False,
        "carbonspan issue 5 (CCF-aligned; CCF Skylake x 2 vCPU = 1.30/8.52)",
        "2021",
    ),
    "m5.xlarge": _ccf("Skylake", 4, 0.65, 4.26),
    "m5.2xlarge": _ccf("Skylake", 8, 0.65, 4.26),
    "c5.large": _ccf("Cascade Lake", 2, 0.64, 3.97),
    "c5.xlarge": _ccf("Cascade Lake", 4, 0.64, 3.97),
    "r5.large": _ccf("Skylake", 2, 0.65, 4.26),
    "m4.large": _ccf("Broadwell", 2, 0.71, 3.69),
    "c4.large": _ccf("Haswell", 2, 1.90, 6.01),
    "m5a.large": _ccf("EPYC 1st gen", 2, 0.82, 2.55),
    "c5a.large": _ccf("EPYC 2nd gen", 2, 0.47, 1.69),
    "m6g.large": _ccf("Graviton2", 2, 0.47, 1.69),
    "n2-standard-2": _ccf("Cascade Lake", 2, 0.64, 3.97),
    "n2-standard-4": _ccf("Cascade Lake", 4, 0.64, 3.97),
    "n2d-standard-2": _ccf("EPYC 2nd gen", 2, 0.47, 1.69),
    "Standard_D2s_v4": _ccf("Cascade Lake", 2, 0.64, 3.97),
    "aws-average": InstancePower(0.74, 3.5, True, f"{_CCF}, AWS fleet average", "2021"),
    "gcp-average": InstancePower(0.71, 4.26, True, f"{_CCF}, GCP fleet average", "2021"),
    "azure-average": InstancePower(0.78, 3.76, True, f"{_CCF}, Azure fleet average", "2021"),
    "generic": InstancePower(
        3.0, 20.0, True, "carbonspan issue 5 (conservative, unknown hardware)", "2026"
    ),
}
