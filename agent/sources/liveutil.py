"""Checks shared by the live-intensity sources: times, plausible values, JSON bodies, secrets.

Kept apart from ``intensity.py`` so the grid-operator modules (``operators.py``,
``entsoe.py``) can use them without importing the sources that use the operators.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from agent.sources.errors import ConfigError, SourceError

# Coal, the most carbon-intensive common generation, emits 740-910 gCO2eq/kWh over its life
# cycle (IPCC AR5 WG3 Annex III, Table A.III.2). A grid mix an order of magnitude above that
# is a broken feed, not a grid: refusing it keeps a bad value (say 1e300) out of the reports.
MAX_PLAUSIBLE_GCO2_KWH = 10_000.0


def parse_time(value: Any, where: str) -> float:
    """RFC 3339 / ISO 8601 (``2024-05-01T12:00:00.000Z``, ``2018-01-20T12:00Z``) -> unix s."""
    if not isinstance(value, str):
        raise SourceError(f"{where}: expected an ISO 8601 time string, got {value!r}")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SourceError(f"{where}: {value!r} is not an ISO 8601 time") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def check_intensity(value: Any, where: str) -> float:
    """A feed's gCO2/kWh as a float, or ``SourceError`` saying why it is not used."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise SourceError(f"{where}: carbon intensity {value!r} is not a non-negative number")
    if value > MAX_PLAUSIBLE_GCO2_KWH:
        raise SourceError(
            f"{where}: carbon intensity {value!r} gCO2/kWh is not plausible for a grid "
            f"(above {MAX_PLAUSIBLE_GCO2_KWH:g}); the value is not used"
        )
    return float(value)


def parse_json(body: bytes, where: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise SourceError(f"{where}: the body is not JSON") from None


def read_secret(env: str, file: str | None, owner: str, what: str, how_to_get: str) -> str:
    """An API key or token from ``file`` (when set) or the environment variable ``env``.

    ``ConfigError`` names ``owner`` (e.g. ``sources.electricity_maps emaps``) and where the
    secret was looked for, never its value.
    """
    if file:
        try:
            secret = Path(file).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"{owner}: cannot read api_key_file {file!r} ({exc.strerror})"
            ) from None
    else:
        secret = os.environ.get(env, "").strip()
    if not secret:
        where = (
            f"api_key_file {file!r} is empty"
            if file
            else f"the environment variable {env} is not set"
        )
        raise ConfigError(f"{owner}: no {what} ({where}); {how_to_get}")
    return secret
