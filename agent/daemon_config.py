"""Settings of ``carbonspan agent``: the ``[agent]`` TOML table, ``CARBONSPAN_*`` env, CLI flags.

Precedence, highest first: command-line flags, environment variables, the TOML file, the
defaults below. Every setting has an environment variable named ``CARBONSPAN_`` plus its key
path in upper case with ``.`` as ``_`` (``[agent.archive] max_size_mb`` ->
``CARBONSPAN_ARCHIVE_MAX_SIZE_MB``; ``[agent] grpc_port`` -> ``CARBONSPAN_GRPC_PORT``).
The agent binds 127.0.0.1 unless ``bind`` says otherwise: exposing an ingest port is a choice.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agent.config import ConfigError

_AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def agent_id_from_host(host: str) -> str:
    """``host`` cut to the characters an archive directory name may use (``_AGENT_ID_RE``)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", host).strip("._-") or "agent"
    return name[:128]


def default_agent_id() -> str:
    """The host name, as a valid agent id: one chain per node by default."""
    return agent_id_from_host(socket.gethostname())


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    """``[agent.archive]``: where and how window lines are written."""

    dir: Path = Path("archives")
    max_size_mb: float = 100.0
    rotate_daily: bool = True
    compress: bool = False
    wal_fsync_delay_ms: float = 0.0  # test knob: slow every WAL flush (simulates a slow disk)
    wal_stall_file: Path | None = None  # test knob: WAL flushes wait while this file exists


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``[agent.auth]``: optional bearer token read from a file (never from the TOML itself)."""

    token_file: Path | None = None


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """``[agent.tls]``: serve both ports over TLS when both files are given."""

    cert_file: Path | None = None
    key_file: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None and self.key_file is not None


@dataclass(frozen=True, slots=True)
class SigningSettings:
    """``[agent.signing]``: sign checkpoints of the chain (docs/auditors-guide.md)."""

    key_file: Path | None = None  # off when unset; made by 'carbonspan keys generate'
    checkpoint_every: int = 1  # windows per checkpoint (also at rotation, start and shutdown)
    witnesses: str = ""  # space- or comma-separated witness URLs (C2SP tlog-witness)
    witness_timeout_s: float = 5.0

    @property
    def witness_urls(self) -> list[str]:
        return [u for u in re.split(r"[\s,]+", self.witnesses) if u]


@dataclass(frozen=True, slots=True)
class SignalLogSettings:
    """``[agent.signal_log]``: append the live sources' intensity values to a signal log
    (``agent/signal_recorder.py``, docs/contracts.md "Recording signals"); off without ``path``."""

    path: Path | None = None
    max_mb: float = 256.0  # rotate to PATH.1 before the file passes this (MiB)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``[agent]``: ports, windows, limits."""

    bind: str = "127.0.0.1"
    grpc_port: int = 4317
    http_port: int = 4318
    agent_id: str = field(default_factory=default_agent_id)
    window_seconds: float = 60.0
    max_window_spans: int = 2_000_000
    max_request_bytes: int = 16 * 1024 * 1024
    queue_size: int = 64  # requests admitted between receiving and the WAL; beyond: 429
    grpc_workers: int = 4  # 2 is slower, 4 and 8 measure alike (docs/operations.md)
    http_workers: int = 0  # 0: HTTP exports on the event loop; N: N threads (docs/operations.md)
    workers: int = 0  # agent processes sharing the ports; 0: one per usable core, at most 8
    max_connections: int = 512  # HTTP connections open; past it the longest-idle is evicted
    http_request_timeout_s: float = 30.0  # one deadline for a request's head and body
    http_idle_timeout_s: float = 30.0  # a keep-alive connection with no request is closed
    shutdown_timeout_s: float = 20.0
    retry_after_s: int = 1
    debug_last_batch: bool = False  # GET /debug/last-batch: span names and attributes (opt-in)
    archive: ArchiveSettings = field(default_factory=ArchiveSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    signing: SigningSettings = field(default_factory=SigningSettings)
    signal_log: SignalLogSettings = field(default_factory=SignalLogSettings)

    @property
    def archive_path(self) -> Path:
        """This agent's own chain directory under the archive root."""
        return self.archive.dir / self.agent_id


_SUBTABLES = {"archive": ArchiveSettings, "auth": AuthSettings, "tls": TlsSettings,
              "signing": SigningSettings, "signal_log": SignalLogSettings}
_POSITIVE = {"window_seconds", "max_window_spans", "max_request_bytes", "queue_size",
             "grpc_workers", "shutdown_timeout_s", "max_size_mb", "max_connections",
             "checkpoint_every", "witness_timeout_s", "http_request_timeout_s",
             "http_idle_timeout_s", "max_mb"}


def _origin(key: str, origin: str) -> str:
    """Where a value came from, for error messages (the TOML key is always named too)."""
    if origin == "env":
        return f" (from CARBONSPAN_{key.replace('.', '_').upper()})"
    if origin == "cli":
        return f" (from --{key.replace('.', '-').replace('_', '-')})"
    return ""


def _coerce(key: str, value: Any, default: Any, from_env: bool, origin: str = "toml") -> Any:
    """Check/convert one value to the type of its default; ConfigError names the key."""
    kind = type(default)
    if key.rsplit(".", 1)[-1] in ("token_file", "cert_file", "key_file", "dir", "wal_stall_file", "path"):
        kind = Path
    try:
        if kind is bool:
            if from_env and isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError
                return value.lower() in ("1", "true", "yes")
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind in (int, float):
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, str) and from_env:
                if kind is int and not re.fullmatch(r"[0-9]{1,18}", value.strip()):
                    raise ValueError
                num = kind(value)
            elif kind is int and isinstance(value, int) or kind is float and isinstance(value, int | float):
                num = kind(value)
            else:
                raise ValueError
            if not math.isfinite(num) or (key.rsplit(".", 1)[-1] in _POSITIVE and num <= 0) or num < 0:
                raise ValueError
            if key.endswith("_port") and num > 65535:
                raise ValueError
            return num
        if kind is Path:
            if not isinstance(value, str) or not value:
                raise ValueError
            return Path(value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (ValueError, OverflowError):
        what = {bool: "true or false", int: "a non-negative integer", float: "a non-negative number",
                Path: "a file or directory path", str: "a string"}[kind]
        if key.rsplit(".", 1)[-1] in _POSITIVE:
            what = what.replace("non-negative", "positive")
        section, _, leaf = key.rpartition(".")
        table = f"agent.{section}" if section else "agent"
        raise ConfigError(
            f"[{table}] {leaf} = {value!r}{_origin(key, origin)}: expected {what}"
        ) from None


def _apply(obj: Any, table: Mapping[str, Any], prefix: str, from_env: bool,
           origin: str = "toml") -> Any:
    known = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if key in _SUBTABLES and key in known:
            if not isinstance(value, Mapping):
                raise ConfigError(f"[agent.{key}] must be a table, got {value!r}")
            changes[key] = _apply(getattr(obj, key), value, f"{prefix}{key}.", from_env, origin)
            continue
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r} in [agent{'.' + prefix.rstrip('.') if prefix else ''}]"
                f"{_origin(name, origin)}; known keys: {', '.join(sorted(known))}"
            )
        changes[key] = _coerce(name, value, getattr(obj, key), from_env, origin)
    return replace(obj, **changes)


def parse_agent(table: Mapping[str, Any] | None, base: AgentSettings | None = None) -> AgentSettings:
    """The ``[agent]`` TOML table (with ``archive``/``auth``/``tls`` sub-tables) as settings."""
    settings = _apply(base or AgentSettings(), table or {}, "", from_env=False)
    return _validate(settings)


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``CARBONSPAN_*`` variables as a nested table in the ``[agent]`` shape."""
    out: dict[str, Any] = {}
    top = {f.name for f in fields(AgentSettings)} - set(_SUBTABLES)
    for name, value in environ.items():
        if not name.startswith("CARBONSPAN_") or name == "CARBONSPAN_CONFIG":
            continue
        key = name[len("CARBONSPAN_"):].lower()
        sub = next((s for s in _SUBTABLES if key.startswith(s + "_")), None)
        if key in top:
            out[key] = value
        elif sub is not None:
            out.setdefault(sub, {})[key[len(sub) + 1:]] = value
    return out


def env_names() -> list[str]:
    """Every ``CARBONSPAN_*`` variable that sets an agent setting."""
    out: list[str] = []
    for f in fields(AgentSettings):
        if f.name in _SUBTABLES:
            out += [f"CARBONSPAN_{f.name}_{g.name}".upper() for g in fields(_SUBTABLES[f.name])]
        else:
            out.append(f"CARBONSPAN_{f.name.upper()}")
    return out


def env_typos(environ: Mapping[str, str]) -> list[str]:
    """Warnings for ``CARBONSPAN_*`` variables that are not settings but look like one.

    Unknown names are ignored (other tools, or a ``[sources]`` ``api_key_env``, may use the
    prefix), so only a near miss of a real name is worth a word: it is almost surely a typo.
    """
    known = env_names()
    out = []
    for name in sorted(environ):
        if not name.startswith("CARBONSPAN_") or name in known or name == "CARBONSPAN_CONFIG":
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            out.append(f"{name} is not a setting and is ignored; did you mean {close[0]}?")
    return out


def resolve(
    table: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None = None,
    cli: Mapping[str, Any] | None = None,
) -> AgentSettings:
    """TOML table, then environment, then CLI flags (``None`` values are "not given")."""
    settings = parse_agent(table)
    env = env_overrides(os.environ if environ is None else environ)
    if env:
        settings = _validate(_apply(settings, env, "", from_env=True, origin="env"))
    given = {k: v for k, v in (cli or {}).items() if v is not None}
    if given:
        archive_dir = given.pop("archive_dir", None)
        if archive_dir is not None:
            given["archive"] = {"dir": str(archive_dir)}
        settings = _validate(_apply(settings, given, "", from_env=False, origin="cli"))
    return settings


def _validate(s: AgentSettings) -> AgentSettings:
    if not _AGENT_ID_RE.match(s.agent_id):
        raise ConfigError(
            f"[agent] agent_id = {s.agent_id!r}: expected 1-128 letters, digits, '.', '_' or '-' "
            "starting with a letter or digit (it names the archive directory)"
        )
    if s.max_request_bytes > 2**31 - 1:
        raise ConfigError(
            f"[agent] max_request_bytes = {s.max_request_bytes}: expected at most 2147483647 "
            "(gRPC message sizes are 32-bit)"
        )
    if (s.tls.cert_file is None) != (s.tls.key_file is None):
        raise ConfigError("[agent.tls] needs both cert_file and key_file (or neither)")
    bad = [u for u in s.signing.witness_urls if not re.match(r"^https?://[^\s/]+", u)]
    if bad:
        raise ConfigError(f"[agent.signing] witnesses: {bad[0]!r} is not an http(s):// URL")
    if s.signing.witness_urls and s.signing.key_file is None:
        raise ConfigError("[agent.signing] witnesses are set but key_file is not: a witness "
                          "cosigns only signed checkpoints; run 'carbonspan keys generate'")
    if s.grpc_port and s.grpc_port == s.http_port:
        raise ConfigError(f"[agent] grpc_port and http_port are both {s.grpc_port}; pick two ports")
    return s


def read_token(settings: AgentSettings) -> bytes | None:
    """The bearer token from ``[agent.auth] token_file`` (stripped), or None when auth is off."""
    path = settings.auth.token_file
    if path is None:
        return None
    try:
        token = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"[agent.auth] token_file = '{path}': cannot read it ({exc.strerror})") from None
    if not token:
        raise ConfigError(f"[agent.auth] token_file = '{path}' is empty; put the token in it")
    return token
