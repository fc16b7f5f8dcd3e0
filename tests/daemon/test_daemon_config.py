"""[agent] settings: defaults, TOML, CARBONSPAN_* environment, CLI precedence, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import ConfigError
from agent.daemon_config import (
    AgentSettings,
    agent_id_from_host,
    env_names,
    env_typos,
    parse_agent,
    read_token,
    resolve,
)


def test_defaults_bind_loopback_and_spec_ports() -> None:
    s = parse_agent(None)
    assert (s.bind, s.grpc_port, s.http_port) == ("127.0.0.1", 4317, 4318)
    assert s.window_seconds == 60.0 and s.max_request_bytes == 16 * 1024 * 1024
    assert s.archive.max_size_mb == 100.0 and s.archive.dir == Path("archives")
    assert s.archive_path == Path("archives") / s.agent_id


def test_toml_table_with_subtables() -> None:
    s = parse_agent({
        "bind": "0.0.0.0", "grpc_port": 14317, "window_seconds": 5, "agent_id": "node-1",
        "archive": {"dir": "/tmp/a", "max_size_mb": 1.5, "compress": True, "rotate_daily": False},
        "auth": {"token_file": "/etc/token"},
        "tls": {"cert_file": "c.pem", "key_file": "k.pem"},
    })
    assert s.bind == "0.0.0.0" and s.grpc_port == 14317 and s.window_seconds == 5.0
    assert s.archive.dir == Path("/tmp/a") and s.archive.compress and not s.archive.rotate_daily
    assert s.auth.token_file == Path("/etc/token") and s.tls.enabled
    assert s.archive_path == Path("/tmp/a/node-1")


def test_precedence_cli_over_env_over_toml() -> None:
    table = {"grpc_port": 1000, "http_port": 1001, "window_seconds": 30,
             "archive": {"max_size_mb": 10}}
    env = {"CARBONSPAN_GRPC_PORT": "2000", "CARBONSPAN_WINDOW_SECONDS": "15",
           "CARBONSPAN_ARCHIVE_MAX_SIZE_MB": "7", "CARBONSPAN_ARCHIVE_COMPRESS": "true",
           "OTHER": "x"}
    s = resolve(table, env, {"grpc_port": 3000, "window_seconds": None, "archive_dir": Path("/d")})
    assert s.grpc_port == 3000  # CLI
    assert s.http_port == 1001  # TOML
    assert s.window_seconds == 15.0  # env (CLI flag not given)
    assert s.archive.max_size_mb == 7.0 and s.archive.compress is True
    assert s.archive.dir == Path("/d")


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"grpc_port": "4317"}, "[agent] grpc_port = '4317': expected a non-negative integer"),
        ({"grpc_port": 70000}, "grpc_port"),
        ({"window_seconds": 0}, "[agent] window_seconds = 0: expected a positive number"),
        ({"archive": {"max_size_mb": -1}}, "[agent.archive] max_size_mb"),
        ({"archive": {"compress": "yes"}}, "[agent.archive] compress = 'yes': expected true or false"),
        ({"colour": "blue"}, "unknown key 'colour' in [agent]; known keys: agent_id, archive,"),
        ({"archive": {"dirr": "x"}},
         "unknown key 'dirr' in [agent.archive]; known keys: compress, dir, max_size_mb,"),
        ({"agent_id": "../etc"}, "agent_id"),
        ({"tls": {"cert_file": "c.pem"}}, "both cert_file and key_file"),
        ({"grpc_port": 5000, "http_port": 5000}, "both 5000"),
        ({"archive": "x"}, "[agent.archive] must be a table"),
        ({"max_request_bytes": 2**31}, "at most 2147483647"),
    ],
)
def test_mistakes_name_the_key_and_what_is_expected(table: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_agent(table)
    assert needle in str(info.value)


def test_bad_env_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="queue_size = 'many'"):
        resolve({}, {"CARBONSPAN_QUEUE_SIZE": "many"})


def test_errors_say_where_the_bad_value_came_from() -> None:
    with pytest.raises(ConfigError) as env:
        resolve({}, {"CARBONSPAN_ARCHIVE_MAX_SIZE_MB": "big"})
    assert str(env.value) == ("[agent.archive] max_size_mb = 'big' (from "
                              "CARBONSPAN_ARCHIVE_MAX_SIZE_MB): expected a positive number")
    with pytest.raises(ConfigError) as cli:
        resolve({}, {}, {"window_seconds": -1.0})
    assert str(cli.value) == ("[agent] window_seconds = -1.0 (from --window-seconds): "
                              "expected a positive number")


def test_token_file(tmp_path: Path) -> None:
    assert read_token(AgentSettings()) is None
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    assert read_token(parse_agent({"auth": {"token_file": str(tok)}})) == b"s3cret"
    tok.write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        read_token(parse_agent({"auth": {"token_file": str(tok)}}))
    with pytest.raises(ConfigError, match="cannot read it"):
        read_token(parse_agent({"auth": {"token_file": str(tmp_path / "nope")}}))


@given(value=st.one_of(st.integers(-10, 70000).map(str), st.text(max_size=8)))
def test_env_port_is_accepted_exactly_when_it_is_a_port(value: str) -> None:
    ascii_digits = value.strip().isascii() and value.strip().isdigit()
    expected = int(value) if ascii_digits else -1
    ok = 0 <= expected <= 65535 and expected != 4318  # 4318 would collide with http_port
    if ok:
        assert resolve({}, {"CARBONSPAN_GRPC_PORT": value}).grpc_port == expected
    else:
        with pytest.raises(ConfigError) as info:
            resolve({}, {"CARBONSPAN_GRPC_PORT": value})
        assert "grpc_port" in str(info.value)


@given(value=st.one_of(st.booleans(), st.integers(), st.floats(), st.sampled_from([
    float("nan"), float("inf"), -0.0]), st.text(max_size=5),
                       st.lists(st.integers(), max_size=2)))
def test_toml_window_seconds_accepts_only_positive_finite_numbers(value) -> None:
    good = (isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            and value == value and value != float("inf"))
    if good:
        assert parse_agent({"window_seconds": value}).window_seconds == float(value)
    else:
        with pytest.raises(ConfigError, match="window_seconds"):
            parse_agent({"window_seconds": value})


def test_huge_integer_is_a_config_error_not_a_crash() -> None:
    with pytest.raises(ConfigError, match="max_request_bytes"):
        parse_agent({"max_request_bytes": 10**400})


def _leaves(obj: object, prefix: str = "") -> list[tuple[str, object]]:
    """Every setting as (key path with '_' between table and key, default)."""
    from dataclasses import fields, is_dataclass

    out: list[tuple[str, object]] = []
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if is_dataclass(value):
            out += _leaves(value, f"{prefix}{f.name}_")
        else:
            out.append((f"{prefix}{f.name}", value))
    return out


def test_every_setting_has_a_carbonspan_environment_variable() -> None:
    """The issue: every setting is overridable by a CARBONSPAN_* variable. Each one here gets a
    value different from its default through the environment alone and must take it."""
    samples = {bool: ("false", "true"), int: ("7", "8"), float: ("2.5", "3.5"), str: ("a-b", "c-d")}
    env: dict[str, str] = {}
    expected: dict[str, object] = {}
    for key, default in _leaves(AgentSettings()):
        if key in ("tls_cert_file", "tls_key_file", "auth_token_file", "archive_dir",
                   "signing_key_file", "archive_wal_stall_file", "signal_log_path"):
            env[f"CARBONSPAN_{key.upper()}"] = f"/x/{key}"
            expected[key] = Path(f"/x/{key}")
            continue
        kind = type(default)
        first, second = samples[kind]
        if kind is bool:
            raw = "false" if default else "true"
        else:
            raw = first if kind(first) != default else second
        if key == "bind":
            raw = "10.0.0.1"
        if key == "signing_witnesses":  # a witness is a URL
            raw = "http://witness.example:8443"
        env[f"CARBONSPAN_{key.upper()}"] = raw
        expected[key] = kind(raw) if kind is not bool else raw == "true"
    env["CARBONSPAN_HTTP_PORT"], expected["http_port"] = "9", 9  # distinct from grpc_port
    got = dict(_leaves(resolve({}, env)))
    assert got == expected
    defaults = dict(_leaves(AgentSettings()))
    assert all(got[k] != defaults[k] for k in got), got


def test_a_near_miss_of_a_variable_name_is_flagged_and_others_are_left_alone() -> None:
    env = {"CARBONSPAN_WINDOW_SECOND": "5", "CARBONSPAN_EM_API_KEY": "k",
           "CARBONSPAN_CONFIG": "c.toml", "CARBONSPAN_GRPC_PORT": "1"}
    assert env_typos(env) == ["CARBONSPAN_WINDOW_SECOND is not a setting and is ignored; "
                              "did you mean CARBONSPAN_WINDOW_SECONDS?"]
    assert set(env_names()) >= {f"CARBONSPAN_{k.upper()}" for k, _ in _leaves(AgentSettings())}


def test_the_default_agent_id_is_the_host_name() -> None:
    import socket

    assert parse_agent(None).agent_id == agent_id_from_host(socket.gethostname())
    assert agent_id_from_host("node-a.example.com") == "node-a.example.com"
    assert agent_id_from_host("über host") == "ber-host"
    assert agent_id_from_host("..") == "agent"


@given(st.text(max_size=300))
def test_any_host_name_becomes_a_valid_agent_id(host: str) -> None:
    """The sanitiser always yields an id parse_agent accepts (it names a directory)."""
    agent_id = agent_id_from_host(host)
    assert parse_agent({"agent_id": agent_id}).agent_id == agent_id
