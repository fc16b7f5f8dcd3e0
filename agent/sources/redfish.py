"""Redfish BMC: the chassis' wall power, shared by the services running on it.

``GET {url}/redfish/v1/Chassis/{chassis_id}/Power`` (DMTF Redfish ``Power`` resource) and
read ``PowerControl[0].PowerConsumedWatts``: the power at the power supplies' input, so it
includes PSU losses, fans, disks and NICs that RAPL does not see. Redfish 2020.4 deprecated
``Power`` in favour of ``PowerSubsystem`` (power supplies) and ``EnvironmentMetrics``, whose
``PowerWatts.Reading`` is the chassis' power (DMTF's "Power and Thermal Model Transition"
guidance maps ``PowerConsumedWatts`` to it). With ``resource = "auto"`` (the default) the
source reads ``Power`` and, on a BMC that answers 404 there, follows the Chassis resource's
``EnvironmentMetrics`` link; ``resource`` can also pin either one.

Basic auth (password from an environment variable or a file, never the TOML), TLS verified
against ``ca_file`` or the system store. The chassis' energy over the interval is
W x interval_s; its services share it by their I/O ops, so every one of them gets

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
from agent.sources.errors import ConfigError, SourceError, SourceNotFound
from agent.sources.http import basic_auth, http_get, tls_context


class RedfishSource(EnergySource):
    kind = "redfish"
    tag = "redfish_bmc"
    settings: RedfishConfig

    def __init__(self, name: str, settings: RedfishConfig, ops, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name, settings, ops, shared_services=settings.services, **kw)
        self.base = settings.url.rstrip("/")
        self.chassis_url = f"{self.base}/redfish/v1/Chassis/{settings.chassis_id}"
        env_metrics = settings.resource == "EnvironmentMetrics"
        self.url = f"{self.chassis_url}/{'EnvironmentMetrics' if env_metrics else 'Power'}"
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
        try:
            watts = self._read_watts(self.url)
        except SourceNotFound:
            if self.settings.resource != "auto" or self.url.endswith("/EnvironmentMetrics"):
                raise
            self.url = self._environment_metrics_url()
            watts = self._read_watts(self.url)
        if elapsed_s is None:
            return None
        return Reading(shared_joules=watts * elapsed_s, total_watts=watts)

    def _get(self, url: str) -> bytes:
        return http_get(
            url, timeout_s=self.settings.timeout_s, headers=self._headers, context=self._tls
        )

    def _read_watts(self, url: str) -> float:
        if url.endswith("/EnvironmentMetrics"):
            return parse_environment_metrics(self._get(url), url)
        return parse_power(self._get(url), url)

    def _environment_metrics_url(self) -> str:
        """The chassis has no ``Power`` resource: follow its ``EnvironmentMetrics`` link."""
        cid = self.settings.chassis_id
        try:
            chassis = orjson.loads(self._get(self.chassis_url))
        except SourceNotFound:
            raise SourceError(
                f"redfish: no chassis {cid!r} at {self.chassis_url}; check `chassis_id` "
                f"(GET {self.base}/redfish/v1/Chassis lists the chassis)"
            ) from None
        except orjson.JSONDecodeError:
            raise SourceError(f"redfish {self.chassis_url}: the body is not JSON") from None
        link = chassis.get("EnvironmentMetrics") if isinstance(chassis, dict) else None
        path = link.get("@odata.id") if isinstance(link, dict) else None
        if not isinstance(path, str) or not path.startswith("/"):
            raise SourceError(
                f"redfish: chassis {cid!r} has neither a Power resource nor an EnvironmentMetrics "
                "link; this BMC does not report the chassis' power over Redfish"
            )
        return self.base + path


def parse_environment_metrics(body: bytes, where: str) -> float:
    """``PowerWatts.Reading`` of a Redfish EnvironmentMetrics resource, or SourceError."""
    try:
        value = orjson.loads(body)["PowerWatts"]["Reading"]
    except orjson.JSONDecodeError:
        raise SourceError(f"redfish {where}: the body is not JSON") from None
    except (KeyError, TypeError):
        raise SourceError(
            f"redfish {where}: no PowerWatts.Reading in the EnvironmentMetrics resource"
        ) from None
    return _watts_value(value, "PowerWatts.Reading", where)


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
    return _watts_value(value, "PowerConsumedWatts", where)


def _watts_value(value: object, name: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise SourceError(f"redfish {where}: {name} is {value!r}, not a non-negative number")
    return float(value)
