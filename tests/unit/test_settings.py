"""Settings: flag > environment (or a secret's `_FILE`) > config file > default; the config
file is strict (unknown keys, secrets and wrong types are refused with a clear error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from kernel.config import CONFIG_FILE_ENV, ConfigError, Settings, env_name, is_secret


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "truerun.toml"
    path.write_text(text)
    return {CONFIG_FILE_ENV: str(path)}


def test_defaults_without_environment_or_file() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({}).grpc_addr == "127.0.0.1:7233"


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    env = _config(tmp_path, 'grpc_addr = "file:1"\nlease_ttl_ms = 111\nmetrics_addr = "file:2"\n')
    env |= {"TRUERUN_GRPC_ADDR": "env:1", "TRUERUN_LEASE_TTL_MS": "222"}

    settings = Settings.from_env(env, grpc_addr="flag:1", data_dir=None)

    assert settings.grpc_addr == "flag:1"  # flag over environment and file
    assert settings.lease_ttl_ms == 222  # environment over file
    assert settings.metrics_addr == "file:2"  # file over default
    assert settings.data_dir == Path(".truerun")  # a flag not given (None) changes nothing
    assert settings.cancel_grace_ms == Settings().cancel_grace_ms


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    env = _config(tmp_path, 'grpc_addr = "file:1"\n') | {"TRUERUN_GRPC_ADDR": ""}
    assert Settings.from_env(env).grpc_addr == "file:1"


def test_file_values_are_typed(tmp_path: Path) -> None:
    env = _config(tmp_path, 'data_dir = "/var/lib/truerun"\ngrace_seconds = 3\nlost_after_ms = 0\n')
    settings = Settings.from_env(env)
    assert settings.data_dir == Path("/var/lib/truerun")
    assert settings.grace_seconds == 3.0 and isinstance(settings.grace_seconds, float)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('grpc_adr = "x"\n', "unknown setting(s) grpc_adr"),
        ("[server]\nport = 1\n", "unknown setting(s) server"),
        ('lease_ttl_ms = "30000"\n', "lease_ttl_ms must be an integer, not '30000'"),
        ("lease_ttl_ms = true\n", "lease_ttl_ms must be an integer, not True"),
        ("grace_seconds = true\n", "grace_seconds must be a number, not True"),
        ("grpc_addr = 7233\n", "grpc_addr must be a string, not 7233"),
        ("grpc_addr = \n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    env = _config(tmp_path, text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        Settings.from_env(env)
    assert env[CONFIG_FILE_ENV] in str(err.value)  # the message names the file


def test_unknown_key_error_lists_the_known_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env(_config(tmp_path, 'grpc_adr = "x"\n'))
    assert "known: data_dir, grpc_addr" in str(err.value)


@pytest.mark.parametrize("key", ["database_url", "runtime_tokens", "redis_url"])
def test_secrets_are_refused_in_the_config_file(tmp_path: Path, key: str) -> None:
    env = _config(tmp_path, f'{key} = "postgresql://u:hunter2@db/truerun"\n')
    with pytest.raises(ConfigError) as err:
        Settings.from_env(env)
    message = str(err.value)
    assert f"{key} is a secret and is never read from the config file" in message
    assert f"TRUERUN_{key.upper()}_FILE" in message
    assert "hunter2" not in message


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        Settings.from_env({CONFIG_FILE_ENV: str(tmp_path / "absent.toml")})


def test_secret_from_a_mounted_file(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("postgresql://u:pw@db:5432/truerun\n")
    (tmp_path / "tokens").write_text("alice:tok1;bob:tok2")
    settings = Settings.from_env(
        {
            "TRUERUN_DATABASE_URL_FILE": str(tmp_path / "url"),
            "TRUERUN_RUNTIME_TOKENS_FILE": str(tmp_path / "tokens"),
        }
    )
    assert settings.database_url == "postgresql://u:pw@db:5432/truerun"  # newline dropped
    assert settings.runtime_tokens == "alice:tok1;bob:tok2"


def test_secret_file_wins_over_the_config_file_only_through_the_environment(
    tmp_path: Path,
) -> None:
    (tmp_path / "url").write_text("postgresql://db/truerun")
    env = _config(tmp_path, 'grpc_addr = "0.0.0.0:7233"\n')
    env["TRUERUN_DATABASE_URL_FILE"] = str(tmp_path / "url")
    settings = Settings.from_env(env)
    assert (settings.database_url, settings.grpc_addr) == (
        "postgresql://db/truerun",
        "0.0.0.0:7233",
    )


def test_a_secret_set_twice_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("postgresql://db/a")
    env = {
        "TRUERUN_DATABASE_URL": "postgresql://db/b",
        "TRUERUN_DATABASE_URL_FILE": str(tmp_path / "url"),
    }
    with pytest.raises(
        ConfigError, match="set TRUERUN_DATABASE_URL or TRUERUN_DATABASE_URL_FILE, not both"
    ):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("content", "message"), [(None, "cannot read it"), ("\n", "the file is empty")]
)
def test_an_unusable_secret_file_is_an_error(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "tokens"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"TRUERUN_RUNTIME_TOKENS_FILE": str(path)})


def test_file_variants_exist_only_for_secrets(tmp_path: Path) -> None:
    (tmp_path / "addr").write_text("10.0.0.1:1")
    assert Settings.from_env({"TRUERUN_GRPC_ADDR_FILE": str(tmp_path / "addr")}).grpc_addr == (
        Settings().grpc_addr
    )


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("TRUERUN_LEASE_TTL_MS", "30s", "TRUERUN_LEASE_TTL_MS='30s' is not an integer"),
        ("TRUERUN_GRACE_SECONDS", "soon", "TRUERUN_GRACE_SECONDS='soon' is not a number"),
    ],
)
def test_a_bad_variable_is_an_error(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({name: raw})


def test_a_config_error_stops_the_process_with_its_message() -> None:
    with pytest.raises(SystemExit) as err:
        Settings.from_env({"TRUERUN_LEASE_TTL_MS": "x"})
    assert str(err.value.code) == "TRUERUN_LEASE_TTL_MS='x' is not an integer"


def test_secrets_are_not_in_the_repr() -> None:
    settings = Settings.from_env(
        {
            "TRUERUN_DATABASE_URL": "postgresql://u:hunter2@db/x",
            "TRUERUN_RUNTIME_TOKENS": "alice:s3cret",
            "TRUERUN_REDIS_URL": "redis://:pw9@r",
        }
    )
    assert settings.database_url == "postgresql://u:hunter2@db/x"
    for secret in ("hunter2", "s3cret", "pw9"):
        assert secret not in repr(settings)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def test_every_setting_is_documented_and_readable_from_env_and_file(tmp_path: Path) -> None:
    # Colleagues add settings as one line; each must have help text and a type that both
    # readers handle, so a value written out is read back the same from either source.
    for f in fields(Settings):
        assert f.metadata.get("help"), f"{f.name} has no help text"
        name = env_name(f)
        assert name.startswith("TRUERUN_")
        from_env = Settings.from_env({name: str(f.default)})
        assert getattr(from_env, f.name) == f.default, name
        if not is_secret(f):
            from_file = Settings.from_env(_config(tmp_path, f"{f.name} = {_toml(f.default)}\n"))
            assert getattr(from_file, f.name) == f.default, f.name
    secrets = {f.name for f in fields(Settings) if is_secret(f)}
    assert {"database_url", "runtime_tokens", "redis_url"} <= secrets


def test_a_bad_setting_stops_a_command_before_it_touches_anything(tmp_path: Path) -> None:
    config = tmp_path / "truerun.toml"
    config.write_text('database_url = "postgresql://u:hunter2@db/x"\n')
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "truerun"), "migrate", "--data-dir", str(data_dir)],
        env={**os.environ, CONFIG_FILE_ENV: str(config)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "database_url is a secret and is never read from the config file" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert not data_dir.exists()  # nothing created, nothing migrated
