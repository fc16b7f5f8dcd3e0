"""ScoringContext: what a scoring pass reads besides the batch (config, model, live signals,
the clock). It stands below the passes that read it (``agent.score``, ``agent.score_fast``,
``agent.carbon.plan``), so none of them imports another for it; ``agent.score`` hands it on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agent.carbon.model import CarbonModel
from agent.carbon.signals import Signals
from agent.config import Config, GreenConfig


@dataclass(frozen=True)
class ScoringContext:
    """What scoring reads besides the batch: config, model, live signals and the clock.

    ``now_ns`` is the window's clock: it judges signal freshness and stands in for absurd
    span timestamps. ``None`` reads the wall clock for freshness and scores spans without a
    timestamp at the annual value (so a context without a clock stays deterministic).
    """

    config: GreenConfig
    model: CarbonModel
    signals: Signals = field(default_factory=Signals)
    now_ns: int | None = None

    @classmethod
    def from_config(
        cls,
        cfg: Config | GreenConfig | None = None,
        signals: Signals | None = None,
        now_ns: int | None = None,
        model: CarbonModel | None = None,
    ) -> ScoringContext:
        green = cfg.green if isinstance(cfg, Config) else (cfg or GreenConfig())
        return cls(green, model or CarbonModel.default(), signals or Signals(), now_ns)

    def now_s(self) -> float:
        return self.now_ns / 1e9 if self.now_ns is not None else time.time()


__all__ = ["ScoringContext"]
