"""Workload contracts: which jobs may wait or move, and within what bounds (docs/contracts.md).

A contract file is YAML (one or several documents). Each document is one of

- ``{workload_contract: {...}}`` (one contract) or ``{workload_contracts: [{...}, ...]}``;
- a Kubernetes object (``kind`` and ``metadata``) whose annotation ``carbonspan.io/workload-contract``
  holds the contract as a YAML or JSON string (the ``workload_contract:`` wrapper optional);
- a Kubernetes ``List`` (``items``) of such objects, as ``kubectl get jobs -o yaml`` prints.

Every field is validated; an error names the contract, the field and what to write instead.
Windows are timezone-aware: ``"HH:MM"`` is local time in ``timezone`` (DST by the IANA
database), an RFC 3339 instant is absolute. :func:`window` turns a contract and a submission
instant into UTC epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

ANNOTATION = "carbonspan.io/workload-contract"
MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$")
#: a region, service or class name: a non-empty string (never a number or a boolean)
Text = Annotated[str, StringConstraints(min_length=1, strict=True)]


class ContractError(ValueError):
    """A contract that cannot be used; the message names the contract, the field and the fix."""


class Runtime(BaseModel):
    # numbers are strict (``true`` or ``"90"`` is not a number) and finite (``.inf`` is refused)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    p50_minutes: float = Field(gt=0, strict=True, description="median runtime, minutes")
    p95_minutes: float = Field(gt=0, strict=True, description="95th-percentile runtime, minutes")

    @model_validator(mode="after")
    def _ordered(self) -> Runtime:
        if self.p95_minutes < self.p50_minutes:
            raise ValueError(f"p95_minutes {self.p95_minutes:g} is below p50_minutes "
                             f"{self.p50_minutes:g}; the 95th percentile is at least the median")
        return self


def _when(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string; write \"HH:MM\" (local) or an RFC 3339 instant")
    if _HHMM.match(value):
        return value
    try:
        d = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        d = None
    if d is None or d.tzinfo is None:
        raise ValueError(f"{value!r} is neither \"HH:MM\" (local time in `timezone`) nor an RFC 3339 "
                         "instant with an offset (e.g. 2026-03-01T06:00:00+09:00)")
    return value


class WorkloadContract(BaseModel):
    """One job's contract. Field meanings and defaults: docs/contracts.md, "Fields"."""

    # numbers and booleans are strict (YAML ``yes`` is not 1 minute, ``"yes"`` not true) and
    # numbers finite; every name is a non-empty string
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    name: str
    job_class: Literal["immediate", "deadline", "flexible"] = Field(alias="class")
    earliest_start: str | None = None
    deadline: str | None = None
    timezone: str = "UTC"
    max_deferral_minutes: int | None = Field(default=None, ge=0, strict=True)
    runtime: Runtime
    energy_kwh: float | None = Field(default=None, gt=0, strict=True)
    service: Text | None = None
    residency: list[Text] = Field(min_length=1)
    home_region: Text
    accelerator: Text = "none"
    security_class: Text | None = None
    max_cost: float | None = Field(default=None, ge=0, strict=True)
    checkpoint: Literal["none", "optional", "required"] = "none"
    cancellation: Literal["safe", "unsafe"] = "unsafe"
    fallback: Literal["run_at_submit", "run_by_deadline", "home_region"] = "run_at_submit"
    carbon_policy: Literal["prefer_lower_intensity", "ignore"] = "prefer_lower_intensity"
    allow_region_move: bool = Field(default=False, strict=True)
    input_data_regions: list[Text] = Field(default_factory=list)
    checkpoint_ids: Literal["region_bound", "region_independent"] = "region_bound"
    recovery_to_home: bool = Field(default=False, strict=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r}: use lower-case letters, digits, '.', '_' or '-' (a Kubernetes-style name)")
        return v

    @field_validator("earliest_start", "deadline", mode="before")
    @classmethod
    def _times(cls, v: Any, info: Any) -> str | None:
        return _when(v, info.field_name)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not an IANA time zone; write e.g. Asia/Seoul or UTC") from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadContract:
        if self.home_region not in self.residency:
            raise ValueError(f"home_region: {self.home_region!r} is not in residency {self.residency}; "
                             "a job must be allowed to run at home")
        if self.energy_kwh is None and self.service is None:
            raise ValueError("energy_kwh: give energy_kwh (kWh per run) or service (to take it from archives)")
        if self.job_class in ("deadline", "flexible") and self.deadline is None:
            raise ValueError(f"deadline: a {self.job_class!r} job needs a deadline (\"HH:MM\" or RFC 3339)")
        return self

    @property
    def may_wait(self) -> bool:
        """Only a non-immediate contract with ``max_deferral_minutes`` > 0 ever waits."""
        return self.job_class != "immediate" and bool(self.max_deferral_minutes)

    @property
    def may_pause_or_move(self) -> bool:
        """``checkpoint: none`` or ``cancellation: unsafe`` forbids pausing and moving."""
        return self.checkpoint != "none" and self.cancellation == "safe"


@dataclass(frozen=True)
class Window:
    """A run's bounds in UTC epoch ms: start no earlier than ``earliest``, no later than
    ``latest_start`` (``max_deferral_minutes`` after submission), finish by ``deadline``."""

    submit: int
    earliest: int
    latest_start: int
    deadline: int | None


def _local(day: datetime, hhmm: str, tz: ZoneInfo) -> int:
    h, m = (int(x) for x in hhmm.split(":"))
    d = datetime.combine(day.date(), dtime(h, m), tzinfo=tz)
    return int(d.astimezone(UTC).timestamp() * 1000)


def _instant(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _next_local(hhmm: str, after_ms: int, tz: ZoneInfo, strict: bool) -> int:
    """The first instant at local ``hhmm`` at (or strictly after) ``after_ms``."""
    local = datetime.fromtimestamp(after_ms / 1000, tz)
    for k in range(-1, 3):
        t = _local(local + timedelta(days=k), hhmm, tz)
        if t > after_ms or (t == after_ms and not strict):
            return t
    raise AssertionError("unreachable: a local time recurs within two days")


def window(c: WorkloadContract, submit_ms: int) -> Window:
    """The contract's window for a job submitted at ``submit_ms``.

    The deadline is the first local ``deadline`` strictly after submission (or the instant);
    the earliest start is the last local ``earliest_start`` at or before the deadline (at most
    a day before it), never before submission. A contract that may not wait has
    ``latest_start == earliest``.
    """
    tz = ZoneInfo(c.timezone)
    deadline = None
    if c.deadline is not None:
        deadline = _instant(c.deadline) if not _HHMM.match(c.deadline) else _next_local(c.deadline, submit_ms, tz, True)
    earliest = submit_ms
    if c.earliest_start is not None:
        if not _HHMM.match(c.earliest_start):
            earliest = max(submit_ms, _instant(c.earliest_start))
        else:
            ref = deadline if deadline is not None else submit_ms + DAY_MS
            e = _next_local(c.earliest_start, ref - DAY_MS, tz, True)
            earliest = max(submit_ms, e if e <= ref else e - DAY_MS)
    if not c.may_wait:
        return Window(submit_ms, submit_ms, submit_ms, deadline)
    latest = submit_ms + int(c.max_deferral_minutes or 0) * MINUTE_MS
    return Window(submit_ms, earliest, max(earliest, latest), deadline)


def local_day(c: WorkloadContract, t_ms: int) -> str:
    """The contract's local calendar day of an instant (restore failures reset at local midnight)."""
    return datetime.fromtimestamp(t_ms / 1000, ZoneInfo(c.timezone)).date().isoformat()


# -- loading ------------------------------------------------------------------------------------


_FIELD_NAMES = {f.alias or name for name, f in WorkloadContract.model_fields.items()}


def _describe(exc: ValidationError, where: str) -> ContractError:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if not loc:  # a check across fields (``_consistent``) names its field first: "home_region: ..."
            field, sep, rest = msg.partition(": ")
            loc, msg = (field, rest) if sep and field in _FIELD_NAMES else ("contract", msg)
        if e["type"] == "missing":
            msg = "required; add it (see docs/contracts.md, \"Fields\")"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling (docs/contracts.md lists every field)"
        parts.append(f"field `{loc}`: {msg}")
    return ContractError(f"{where}: " + "; ".join(parts))


def parse_contract(data: Any, where: str = "contract") -> WorkloadContract:
    """One contract from a mapping (with or without the ``workload_contract`` wrapper)."""
    if isinstance(data, dict) and set(data) == {"workload_contract"}:
        data = data["workload_contract"]
    if not isinstance(data, dict):
        raise ContractError(f"{where}: expected a mapping of contract fields, got {type(data).__name__}")
    label = f"{where} {data.get('name')!r}" if isinstance(data.get("name"), str) else where
    try:
        return WorkloadContract.model_validate(data)
    except ValidationError as exc:
        raise _describe(exc, label) from None


def from_annotation(value: str, where: str = f"annotation {ANNOTATION}") -> WorkloadContract:
    """A contract given as a Kubernetes annotation value (YAML or JSON text)."""
    try:
        data = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ContractError(f"{where}: not YAML/JSON: {exc}") from None
    return parse_contract(data, where)


def _from_document(doc: Any, where: str) -> list[WorkloadContract]:
    if doc is None:
        return []
    if isinstance(doc, list):
        return [c for i, d in enumerate(doc) for c in _from_document(d, f"{where}[{i}]")]
    if not isinstance(doc, dict):
        raise ContractError(f"{where}: expected workload_contract(s) or a Kubernetes object")
    if "workload_contracts" in doc:
        items = doc["workload_contracts"]
        if not isinstance(items, list) or set(doc) != {"workload_contracts"}:
            raise ContractError(f"{where}: `workload_contracts` must be the only key and hold a list")
        return [parse_contract(d, f"{where} workload_contracts[{i}]") for i, d in enumerate(items)]
    if "items" in doc and "kind" in doc:
        return [c for i, d in enumerate(doc["items"] or []) for c in _from_document(d, f"{where} items[{i}]")]
    if "kind" in doc and "metadata" in doc:
        ann = (doc.get("metadata") or {}).get("annotations") or {}
        obj = f"{doc['kind']} {(doc.get('metadata') or {}).get('name')}"
        if ANNOTATION not in ann:
            raise ContractError(f"{where}: {obj} has no annotation {ANNOTATION}")
        return [from_annotation(ann[ANNOTATION], f"{where} {obj} annotation {ANNOTATION}")]
    return [parse_contract(doc, where)]


def load_contracts(path: str | Path) -> dict[str, WorkloadContract]:
    """Every contract in a YAML file, by name; a repeated name is an error."""
    p = Path(path)
    try:
        docs = list(yaml.safe_load_all(p.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ContractError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ContractError(f"{p}: not YAML: {exc}") from None
    out: dict[str, WorkloadContract] = {}
    for i, doc in enumerate(docs):
        for c in _from_document(doc, f"{p.name} document {i + 1}"):
            if c.name in out:
                raise ContractError(f"{p}: contract name {c.name!r} appears twice; names must be unique")
            out[c.name] = c
    if not out:
        raise ContractError(f"{p}: no workload_contract found (docs/contracts.md shows the format)")
    return out
