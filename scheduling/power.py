"""CPU and GPU power models: watts from utilisation u in [0, 1] (OpenDC's PowerModels.java, as facts).

| modelType | P(u) |
|---|---|
| linear | idle + (max - idle) u |
| square | idle + (max - idle) u^2 |
| cubic | idle + (max - idle) u^3 |
| sqrt | idle + (max - idle) sqrt(u) |
| mse | idle + (max - idle) (2u - u^r), r = calibrationFactor |
| asymptotic | idle + (max - idle)/2 (1 + u - e^(-u / a)), a = asymUtil; with dvfs true u^3 for u |
| constant | power |
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODEL_TYPES = ("linear", "square", "cubic", "sqrt", "mse", "asymptotic", "constant")


@dataclass(frozen=True)
class PowerModel:
    kind: str
    idle: float
    max: float
    power: float = 0.0
    calibration: float = 1.0
    asym_util: float = 0.3
    dvfs: bool = False  # asymptotic only: OpenDC's DVFS variant

    def __post_init__(self) -> None:
        if self.kind not in MODEL_TYPES:
            raise ValueError(f"modelType {self.kind!r}: use one of {', '.join(MODEL_TYPES)}")
        if self.idle < 0 or self.max < 0 or self.max < self.idle:
            raise ValueError(
                f"need 0 <= idlePower <= maxPower (got idle {self.idle}, max {self.max})"
            )
        if self.kind == "mse" and self.calibration <= 0:
            raise ValueError("mse: calibrationFactor must be > 0")
        if self.kind == "asymptotic" and self.asym_util <= 0:
            raise ValueError("asymptotic: asymUtil must be > 0")

    def watts(self, u: np.ndarray) -> np.ndarray:
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        span = self.max - self.idle
        if self.kind == "linear":
            return self.idle + span * u
        if self.kind == "square":
            return self.idle + span * u * u
        if self.kind == "cubic":
            return self.idle + span * u ** 3
        if self.kind == "sqrt":
            return self.idle + span * np.sqrt(u)
        if self.kind == "mse":
            return self.idle + span * (2 * u - u ** self.calibration)
        if self.kind == "asymptotic":
            v = u ** 3 if self.dvfs else u
            return self.idle + span / 2 * (1 + v - np.exp(-v / self.asym_util))
        return np.full(u.shape, self.power)
