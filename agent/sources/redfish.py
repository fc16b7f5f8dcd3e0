"""Redfish BMC: the chassis' wall power, shared by the services running on it.

``GET {url}/redfish/v1/Chassis/{chassis_id}/Power`` (DMTF Redfish ``Power`` resource) and
read ``PowerControl[0].PowerConsumedWatts``: the power at the power supplies' input, so it
includes PSU losses, fans, disks and NICs that RAPL does not see. Redfish 2020.4 deprecated
``Power`` in favour of ``PowerSubsystem`` (power supplies) and ``EnvironmentMetrics``, whose
``PowerWatts.Reading`` is the chassis' power (DMTF's "Power and Thermal Model Transition"
guidance maps ``PowerConsumedWatts`` to it). With ``resource = "auto"`` (the default) the
first poll looks for the ``EnergykWh`` counter below (Chassis -> its ``EnvironmentMetrics``
link) and reads EnvironmentMetrics when it has one; otherwise the source reads ``Power`` and,
on a BMC that answers 404 there, EnvironmentMetrics. ``resource`` can also pin either one.

Basic auth (password from an environment variable or a file, never the TOML), TLS verified
against ``ca_file`` or the system store. The chassis' energy over the interval is
W x interval_s; its services share it by their I/O ops, so every one of them gets

    kWh/op = W x interval_s / 3.6e6 / (sum of the services' ops).

EnvironmentMetrics v1.1 (Redfish 2020.4) adds ``EnergykWh`` ("The energy consumption (kWh)"),
a cumulative counter at the chassis. Where the resource carries a numeric
``EnergykWh.Reading`` the interval's energy is the counter's increase between two successive
polls, ``(kWh_now - kWh_prev) x 3.6e6`` J, which also counts a burst between polls that one
power sample per interval misses. The first reading is only a baseline (PowerWatts x
interval_s is used for that interval when present); a counter that goes backwards, or a
reading that is negative or implies more than ``MAX_METER_WATTS``, is never energy: it is
counted and a new baseline starts (PowerWatts again carries that interval). A missing or non-numeric counter means the source works on PowerWatts as before.
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from pathlib import Path

import orjson

from agent.sources.config import RedfishConfig
from agent.sources.energy import J_PER_KWH, MAX_METER_WATTS, EnergySource, Reading
from agent.sources.errors import ConfigError, SourceError, SourceNotFound
from agent.sources.http import basic_auth, http_get, tls_context

log = logging.getLogger(__name__)


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
        self._probe = settings.resource == "auto"  # look for the counter at the first poll
        self._env_url: str | None = None  # the chassis' EnvironmentMetrics link, once followed
        self.counter = KwhCounter(name)
        # provenance, in health(): 1 while the last interval's energy came from EnergykWh
        self.stats.update(self.counter.stats())

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
        sample = None
        if self._probe:
            self._probe = False
            sample = self._probe_counter()  # this poll's sample when the counter is there
        if sample is None:
            try:
                sample = self._read_sample(self.url)
            except SourceNotFound:
                if self.settings.resource != "auto" or self.url.endswith("/EnvironmentMetrics"):
                    raise
                self.url = self._environment_metrics_url()
                sample = self._read_sample(self.url)
        watts, kwh = sample
        joules = self.counter.step(kwh, elapsed_s)  # always: the first poll sets the baseline
        if joules == 0.0 and watts:
            # the counter did not move while the BMC reports power: its resolution is coarser
            # than one interval's energy (the sum over time stays exact; shorter spans do not)
            self.counter.count("stalled", f"EnergykWh.Reading stayed at {kwh} kWh at {watts} W")
        self.stats.update(self.counter.stats())
        if elapsed_s is None:
            return None
        if joules is not None:
            return Reading(shared_joules=joules, total_watts=joules / elapsed_s)
        if watts is None:  # a counter baseline and no PowerWatts: nothing to publish yet
            return None
        return Reading(shared_joules=watts * elapsed_s, total_watts=watts)

    def _get(self, url: str) -> bytes:
        return http_get(
            url, timeout_s=self.settings.timeout_s, headers=self._headers, context=self._tls
        )

    def _read_sample(self, url: str) -> tuple[float | None, float | None]:
        """(watts, EnergykWh.Reading); the counter is None on a ``Power`` resource."""
        if url.endswith("/EnvironmentMetrics"):
            return parse_environment_metrics_sample(self._get(url), url)
        return parse_power(self._get(url), url), None

    def _probe_counter(self) -> tuple[float | None, float | None] | None:
        """``resource = "auto"``, first poll: when the Chassis' EnvironmentMetrics carries a
        numeric ``EnergykWh.Reading`` - even if ``Power`` still answers (many BMCs serve both,
        and the counter is the better measure) - read EnvironmentMetrics from now on and return
        the sample just fetched; None otherwise, or when anything on the way fails - the poll
        then goes on exactly as without the probe, and reports its own errors."""
        try:
            url = self._environment_metrics_url()
            sample = parse_environment_metrics_sample(self._get(url), url)
        except SourceError:  # includes SourceNotFound: no chassis, no link, no PowerWatts, ...
            return None
        if sample[1] is None:
            return None
        log.info("redfish %s: the chassis reports a cumulative energy counter (EnergykWh); "
                 "reading %s", self.name, url)
        self.url = url
        return sample

    def _environment_metrics_url(self) -> str:
        """The chassis has no ``Power`` resource: follow its ``EnvironmentMetrics`` link."""
        if self._env_url is None:
            self._env_url = self._follow_environment_metrics_link()
        return self._env_url

    def _follow_environment_metrics_link(self) -> str:
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
    return _power_watts(_json_object(body, where), where)


def parse_environment_metrics_sample(body: bytes, where: str) -> tuple[float | None, float | None]:
    """(``PowerWatts.Reading``, ``EnergykWh.Reading``) of an EnvironmentMetrics resource.

    Without a numeric counter PowerWatts is required, exactly as before the counter was read;
    with one, a missing or unusable PowerWatts is None (the counter carries the energy).
    """
    doc = _json_object(body, where)
    energy = doc.get("EnergykWh")
    kwh = energy.get("Reading") if isinstance(energy, dict) else None
    if isinstance(kwh, bool) or not isinstance(kwh, int | float):
        return _power_watts(doc, where), None
    try:
        watts: float | None = _power_watts(doc, where)
    except SourceError:
        watts = None
    return watts, float(kwh)


def _json_object(body: bytes, where: str) -> dict:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise SourceError(f"redfish {where}: the body is not JSON") from None
    if not isinstance(doc, dict):
        raise SourceError(f"redfish {where}: the body is not a JSON object")
    return doc


def _power_watts(doc: dict, where: str) -> float:
    try:
        value = doc["PowerWatts"]["Reading"]
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


class KwhCounter:
    """Successive ``EnergykWh.Reading`` values -> joules per interval, never negative or huge.

    ``step`` returns the increase since the previous poll in joules (1 kWh = 3.6e6 J), or
    None when there is no usable pair: the first reading, a counter that went backwards (a
    BMC reset or wrap: ``resets``), a negative or non-finite value or an increase implying
    more than ``MAX_METER_WATTS`` (``rejected``). Each of those starts a new baseline (an
    unusable value leaves none) and is logged once per source; later ones are only counted.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.last: float | None = None
        self.used = False  # the last step produced the interval's energy
        self.resets = 0
        self.rejected = 0
        self.stalled = 0  # zero increases while PowerWatts > 0: a coarse counter
        self._logged: set[str] = set()

    def step(self, kwh: float | None, elapsed_s: float | None) -> float | None:
        prev, self.last, self.used = self.last, kwh, False
        if kwh is None:  # absent: PowerWatts carries the energy; a later counter starts afresh
            return None
        if not math.isfinite(kwh) or kwh < 0:
            self.last = None
            self.count("rejected", f"EnergykWh.Reading is {kwh!r}, not a non-negative number")
            return None
        if prev is None or elapsed_s is None:
            return None
        delta = kwh - prev
        if delta < 0:
            self.count("resets", f"EnergykWh.Reading went back from {prev} to {kwh} kWh "
                       "(a BMC reset or wrap?); a new baseline starts there")
            return None
        joules = delta * J_PER_KWH
        if joules / elapsed_s > MAX_METER_WATTS:
            self.count("rejected", f"EnergykWh.Reading rose by {delta:.6g} kWh in {elapsed_s:.3g} s")
            return None
        self.used = True
        return joules

    def stats(self) -> dict[str, int]:
        return {
            "energy_counter": int(self.used),
            "counter_resets": self.resets,
            "counter_rejected": self.rejected,
            "counter_stalled": self.stalled,
        }

    def count(self, what: str, message: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        if what not in self._logged:
            self._logged.add(what)
            log.warning(
                "redfish %s: %s (further cases are only counted in health() counter_%s)",
                self.name, message, what,
            )
