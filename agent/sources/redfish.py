"""Redfish BMC: the chassis' wall power, shared by the services running on it.

``GET {url}/redfish/v1/Chassis/{chassis_id}/Power`` (DMTF Redfish ``Power`` resource) and
read ``PowerControl[0].PowerConsumedWatts``: the power at the power supplies' input, so it
includes PSU losses, fans, disks and NICs that RAPL does not see. Basic auth (password from
an environment variable or a file, never the TOML), TLS verified against ``ca_file`` or the
system store. The chassis' energy over the interval is W x interval_s; its services share it
by their I/O ops, so every one of them gets

    kWh/op = W x interval_s / 3.6e6 / (sum of the services' ops).
"""

from __future__ import annotations

import math
import os
import ssl
from pathlib import Path

import orjson

from agent.sources.config import RedfishConfig
from agent.sources.energy import EnergySource, Reading
from agent.sources.errors import ConfigError, SourceError
from agent.sources.http import basic_auth, http_get, tls_context


class RedfishSource(EnergySource):
    kind = "redfish"
    tag = "redfish_bmc"
    settings: RedfishConfig

    def __init__(self, name: str, settings: RedfishConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, shared_services=settings.services, **kw)
        self.url = f"{settings.url.rstrip('/')}/redfish/v1/Chassis/{settings.chassis_id}/Power"
        self._headers = {"Accept": "application/json"}
        self._tls: ssl.SSLContext | None = None

    def start(self) -> None:
        cfg = self.settings
        if cfg.username is not None:
            self._headers["Authorization"] = basic_auth(cfg.username, self._password())
        if cfg.url.startswith("https://"):
            if cfg.ca_file is not None and not Path(cfg.ca_file).is_file():
                raise ConfigError(
                    f"sources.redfish {self.name}: ca_file {cfg.ca_file!r} does not exist"
                )
            self._tls = tls_context(cfg.ca_file, cfg.verify_tls)

    def _password(self) -> str:
        cfg = self.settings
        if cfg.password_file:
            try:
                return Path(cfg.password_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"sources.redfish {self.name}: cannot read password_file {cfg.password_file!r} ({exc.strerror})"
                ) from None
        value = os.environ.get(cfg.password_env or "")
        if not value:
            raise ConfigError(
                f"sources.redfish {self.name}: the environment variable {cfg.password_env} "
                "(password_env) is not set; export the BMC password there"
            )
        return value

    def read(self, elapsed_s: float | None) -> Reading | None:
        body = http_get(
            self.url, timeout_s=self.settings.timeout_s, headers=self._headers, context=self._tls
        )
        watts = parse_power(body, self.url)
        if elapsed_s is None:
            return None
        return Reading(shared_joules=watts * elapsed_s, total_watts=watts)


def parse_power(body: bytes, where: str) -> float:
    """``PowerControl[0].PowerConsumedWatts`` of a Redfish Power resource, or SourceError."""
    try:
        doc = orjson.loads(body)
        value = doc["PowerControl"][0]["PowerConsumedWatts"]
    except orjson.JSONDecodeError:
        raise SourceError(f"redfish {where}: the body is not JSON") from None
    except (KeyError, IndexError, TypeError):
        raise SourceError(
            f"redfish {where}: no PowerControl[0].PowerConsumedWatts in the Power resource"
        ) from None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise SourceError(
            f"redfish {where}: PowerConsumedWatts is {value!r}, not a non-negative number"
        )
    return float(value)
