"""Settings of every truerun process: one frozen object, read once at start.

Where a value comes from, strongest first: a CLI flag, a `TRUERUN_*` environment variable (or
for a secret its `TRUERUN_*_FILE` twin naming a mounted file), the TOML file named by
`TRUERUN_CONFIG_FILE`, the default. Secrets are never read from the config file: that file
usually lives in a ConfigMap or a repository. `docs/operations.md` lists every setting
(`python -m kernel.config_doc` prints that table).

Adding a setting is one line: `name: type = setting(default, "help")`; its variable is
`TRUERUN_<NAME>`, its config-file key `name`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

CONFIG_FILE_ENV = "TRUERUN_CONFIG_FILE"
#: TRUERUN_CLAIM_GATHER_MS's default, also the dispatcher's (issue #16: 20 -> 40 ms).
CLAIM_GATHER_MS = 40
#: The highest TRUERUN_INPUT_MAX_DEPTH (kernel/json_bounds.DEPTH_CEILING says why).
INPUT_DEPTH_CEILING = 24

T = TypeVar("T")


class ConfigError(SystemExit):
    """A setting that cannot be used. A SystemExit so that the process stops with this one
    clear message before it opens anything, whichever command read the settings."""


def setting(default: T, help: str, *, secret: bool = False) -> T:
    """One setting. A secret comes only from the environment or a `*_FILE` mount, and is
    left out of the settings' repr so that logging them never prints it."""
    return field(default=default, repr=not secret, metadata={"help": help, "secret": secret})


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = setting(Path(".truerun"), "where the embedded SQLite database lives")
    database_url: str = setting(
        "", "postgresql://... or sqlite:///path; empty = SQLite in the data dir", secret=True
    )
    grpc_addr: str = setting("127.0.0.1:7233", "host:port to serve gRPC on (port 0 = any)")
    redis_url: str = setting(
        "",
        "redis://... for capacity observations; empty = in-memory (embedded)",
        secret=True,
    )
    observation_ttl_ms: int = setting(
        15_000, "how long a runtime's capacity observation counts without a new heartbeat"
    )
    runtime_tokens: str = setting(
        "",
        "owner:token[:projA,projB] entries separated by ';' that runtimes authenticate with: "
        "the owner and the projects (none or * = all) each serves (docs/tenancy.md); "
        "empty in `truerun dev` = one token for any owner, written to DATA_DIR/runtime.token",
        secret=True,
    )
    cancel_grace_ms: int = setting(
        5_000, "how long a runtime waits after SIGTERM before SIGKILL when cancelling"
    )
    start_timeout_ms: int = setting(
        10_000,
        "how long the dispatcher waits for a runtime's answer to Start before the "
        "attempt's sync turns stale (shown unknown, capacity held, inspected)",
    )
    claim_gather_ms: int = setting(
        CLAIM_GATHER_MS,
        "after a claim round that took some runs, not a full round, and ran the queue dry, "
        "how long the dispatcher waits before the next, so runs created meanwhile go out in "
        "one round (fewer statements per run under load); a run created while the "
        "dispatcher is idle is claimed at once, and a round held back by the runtime's "
        "capacity waits for an attempt to end instead (0 = never wait)",
    )
    lease_ttl_ms: int = setting(
        30_000,
        "claim lease: an unstarted claim past it is requeued (its dispatcher died); a "
        "started attempt's lease is renewed by the runtime's heartbeats, and past it "
        "without one the attempt shows unknown",
    )
    lost_after_ms: int = setting(
        0,
        "how long a runtime may stay silent before its unknown attempts are declared "
        "lost by policy (0 = never: a person decides); keep it above the runtimes' "
        "self_fence_after plus a margin, or a replacement may overlap the original",
    )
    max_recoveries: int = setting(
        5,
        "how often the reconciler may recover one run (requeue an expired claim, retry a "
        "lost attempt) before the next recovery parks it in dead_letter for an operator "
        "(0 = no limit)",
    )
    no_output_cancel_after_ms: int = setting(
        0,
        "how long a running attempt in sync may go without a runtime event before the "
        "reconciler requests its cancel (reason 'no output for N ms'; the runtime confirms "
        "it; an unknown attempt's silence is its runtime's, never counted) (0 = never)",
    )
    input_max_depth: int = setting(
        16,
        "input bound (docs/operations.md, Input bounds): how deep a JSON value a door accepts "
        "may nest (CreateRun spec, webhook payloads, long-task requests and plans, runtime "
        "event payloads); past it INPUT_OUT_OF_BOUNDS / REST 400, nothing written. At most 24: "
        "a reader decodes a Struct, ~3 messages a level, and protobuf stops at 100",
    )
    input_max_bytes: int = setting(
        64 * 1024,
        "input bound: the largest JSON value or text (compact UTF-8 encoding) a door accepts; "
        "past it INPUT_TOO_LARGE / REST 413, nothing written (output chunks: per chunk)",
    )
    input_max_items: int = setting(
        1_000, "input bound: the most keys in a JSON object or items in an array"
    )
    input_max_string: int = setting(
        16 * 1024,
        "input bound: the longest string (characters) in a JSON value, a label or a webhook "
        "header a door accepts",
    )
    output_max_bytes: int = setting(
        16 * 1024 * 1024,
        "how much output truerun stores per attempt (redacted, outside the event log); past "
        "it a 'truncated' marker, the rest stays in the runtime's log file",
    )
    output_note_interval_ms: int = setting(
        60_000,
        "at most one 'output progressed to N' note per attempt in the event log this often",
    )
    output_retention_days: int = setting(
        30,
        "stored output of attempts that ended longer ago than this is deleted by the "
        "reconciler (0 = keep forever); readers then say it expired",
    )
    schedule_event_retention_days: int = setting(
        90,
        "schedule events (fired, skipped, missed, ...) older than this are deleted by the "
        "reconciler, each schedule's newest kept (0 = keep forever); a schedule's run list "
        "then shows the fires still recorded",
    )
    long_task_owner_concurrency: int = setting(
        4,
        "how many long tasks of one owner may be active at once (running, verifying or "
        "waiting for an approval); the reconciler's scheduler starts queued ones, oldest "
        "first, as slots free up",
    )
    long_task_owner_max_unfinished: int = setting(
        100,
        "how many long tasks that are not finished (completed, partial, failed, cancelled) "
        "one owner may keep; creating another is refused (0 = no cap)",
    )
    notice_max_deliveries: int = setting(
        8,
        "how many times a long-task notice is posted to one webhook (a 2xx ends it; a "
        "failure waits notice_retry_base_ms, doubling each try up to an hour) before its "
        "delivery is dead-lettered, visible in ListNoticeDeliveries",
    )
    notice_retry_base_ms: int = setting(
        1000,
        "the first wait before a failed long-task notice delivery is tried again; each "
        "further failure doubles it (at most one hour)",
    )
    notice_webhook_allow: str = setting(
        "",
        "the hosts long-task notice webhooks may post to: comma-separated host, host:port, "
        "*.domain or *.domain:port (empty = any host); checked at registration "
        "(NOTICE_WEBHOOK_NOT_ALLOWED) and before every post. Link-local and cloud metadata "
        "addresses (169.254.0.0/16, fe80::/10, metadata hosts) are always refused",
    )
    long_task_retention_days: int = setting(
        90,
        "a long task finished (completed, partial, failed, cancelled) longer ago than this "
        "is trimmed by the reconciler: its state changes, criteria results and summaries "
        "stay, other events, evidence payloads and its notices with their webhook "
        "deliveries go (0 = keep forever); an unfinished task is never trimmed",
    )
    metrics_addr: str = setting(
        "127.0.0.1:0", "host:port of the Prometheus /metrics endpoint (port 0 = any)"
    )
    http_addr: str = setting(
        "127.0.0.1:0",
        "host:port the gateway serves REST, Server-Sent Events and the dashboard on (port 0 = any)",
    )
    services_addr: str = setting(
        "127.0.0.1:7233", "the services' gRPC address that `truerun gateway` calls"
    )
    trusted_proxies: str = setting(
        "",
        "the proxies whose X-Forwarded-For / Forwarded headers the gateway believes: "
        "comma-separated addresses or CIDRs (10.0.0.5, 10.0.0.0/8, ::1); empty = none, every "
        "client is its peer address (what the failed-authentication bound counts by; "
        'docs/gateway.md "Client addresses")',
    )
    api_tokens: str = setting(
        "",
        "API bearer tokens of every gRPC service and the gateway: [name=]token:projA,projB"
        "[:operator|:service][:owners=o1,o2][:groups=g1] entries separated by ';' (project "
        "* = all; :operator allows the operator commands and every owner, :service is "
        "truerun's own identity; a named person acts for themself unless owners= says more; "
        "docs/tenancy.md); empty in `truerun dev` = one all-projects operator token written "
        "to DATA_DIR/api.token",
        secret=True,
    )
    service_token: str = setting(
        "",
        "the API token `truerun coordinator` calls the capacity service with, and "
        "`truerun gateway` vouches for its clients' addresses with: one of the called "
        "services' TRUERUN_API_TOKENS, with the :service role (docs/tenancy.md)",
        secret=True,
    )
    webhook_key: str = setting(
        "",
        "the key schedules' webhook signing secrets are derived from (each secret is shown "
        "once at creation and never stored; changing the key changes them all); empty = no "
        "webhooks, except `truerun dev`, which keeps one in DATA_DIR/webhook.key",
        secret=True,
    )
    grace_seconds: float = setting(
        10.0,
        "how long a graceful shutdown (SIGTERM) may take: health NOT_SERVING, no new calls, "
        "runtime streams drained (events applied and acknowledged), calls in flight finished",
    )
    capacity_addr: str = setting(
        "",
        "where `truerun coordinator` and `truerun gateway` reach the capacity service: "
        "host:port, or several replicas as ipv4:h1:p1,h2:p2 or dns:///name:port (calls go "
        "round-robin); the gateway uses services_addr when empty",
    )
    otel_exporter: str = setting(
        "none", "OpenTelemetry trace exporter: none, console (JSON lines on stdout) or otlp"
    )
    otel_endpoint: str = setting(
        "", "the OTLP/gRPC collector for otel_exporter=otlp (empty = the exporter's default)"
    )
    metrics_scan_interval_ms: int = setting(
        15_000,
        "how often the store gauges (oldest non-terminal run per status, queue depth and "
        "oldest queued age per project) are read: one grouped query over an index each time",
    )
    log_format: str = setting(
        "",
        "how processes write their logs to stderr: json (one JSON object per line: ts, level, "
        "logger, msg, request_id/run_id/attempt_id/project when known, exc) or text; empty = "
        "json for coordinator, capacity, reconciler and gateway, text for `truerun dev` and "
        "`truerun migrate` (the chart's migration Job sets json)",
    )
    tls_cert_file: str = setting(
        "",
        "PEM certificate (chain) this process serves TLS with; with tls_key_file every "
        "listener (gRPC, gateway HTTP, metrics) serves TLS only (empty = plaintext)",
    )
    tls_key_file: str = setting("", "PEM private key of tls_cert_file (set both or neither)")
    tls_client_ca_file: str = setting(
        "",
        "PEM CA bundle: when set (with tls_cert_file), gRPC requires a client certificate "
        "signed by it (mTLS, meant for runtimes): every gRPC client must then present one",
    )
    tls_ca_file: str = setting(
        "",
        "PEM CA bundle this process's gRPC clients (coordinator to capacity, gateway to the "
        "services, `truerun dev`'s gateway) verify servers with; setting it turns TLS on "
        "for them, as does an https:// target (system trust store)",
    )
    tls_client_cert_file: str = setting(
        "", "PEM client certificate those gRPC clients present to a server requiring mTLS"
    )
    tls_client_key_file: str = setting(
        "", "PEM private key of tls_client_cert_file (set both or neither)"
    )

    def __post_init__(self) -> None:
        # A deeper bound would let a door accept what no reader can decode (kernel/json_bounds.py).
        if not 1 <= self.input_max_depth <= INPUT_DEPTH_CEILING:
            ceiling, got = INPUT_DEPTH_CEILING, self.input_max_depth
            raise ConfigError(f"TRUERUN_INPUT_MAX_DEPTH must be 1..{ceiling} (got {got})")
        for name in ("input_max_bytes", "input_max_items", "input_max_string"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TRUERUN_{name.upper()} must be at least 1")

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'truerun.db').resolve()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read every setting; `overrides` (CLI flags, None = not given) win over everything."""
        env = os.environ if environ is None else environ
        kinds = get_type_hints(cls)
        values: dict[str, object] = {}
        config_file = env.get(CONFIG_FILE_ENV, "")
        if config_file:
            values.update(_from_file(Path(config_file), kinds))
        for f in fields(cls):
            raw = _from_environment(f, env)
            if raw is not None:
                values[f.name] = _parse(kinds[f.name], raw, env_name(f))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def env_name(f: Field[Any]) -> str:
    return str(f.metadata.get("env") or f"TRUERUN_{f.name.upper()}")


def is_secret(f: Field[Any]) -> bool:
    return bool(f.metadata.get("secret", False))


def _from_environment(f: Field[Any], env: Mapping[str, str]) -> str | None:
    """The variable's value, or for a secret the content of the file its `_FILE` twin names;
    None when neither is set (an empty variable counts as unset)."""
    name = env_name(f)
    direct = env.get(name, "")
    file_name = env.get(f"{name}_FILE", "") if is_secret(f) else ""
    if direct and file_name:
        raise ConfigError(f"set {name} or {name}_FILE, not both")
    if not file_name:
        return direct or None
    try:
        content = Path(file_name).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ConfigError(f"{name}_FILE={file_name}: cannot read it: {error.strerror}") from None
    if not content:
        raise ConfigError(f"{name}_FILE={file_name}: the file is empty")
    return content


def _from_file(path: Path, kinds: Mapping[str, object]) -> dict[str, object]:
    where = f"{CONFIG_FILE_ENV}={path}"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: not valid TOML: {error}") from None
    spec = {f.name: f for f in fields(Settings)}
    unknown = sorted(set(table) - set(spec))
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting(s) {', '.join(unknown)}; "
            f"known: {', '.join(n for n in spec if not is_secret(spec[n]))}"
        )
    secrets = sorted(n for n in table if is_secret(spec[n]))
    if secrets:
        hints = ", ".join(f"{env_name(spec[n])} or {env_name(spec[n])}_FILE" for n in secrets)
        raise ConfigError(
            f"{where}: {', '.join(secrets)} is a secret and is never read from the config "
            f"file; set {hints}"
        )
    return {
        name: _check_file_value(kinds[name], v, f"{where}: {name}") for name, v in table.items()
    }


def _check_file_value(kind: object, value: object, where: str) -> object:
    # TOML values come typed: only the exact type, or a lossless widening, is accepted.
    if kind not in _KIND_NAMES:
        raise TypeError(f"{where}: settings of type {kind!r} are not supported")
    if type(value) is kind:
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise ConfigError(f"{where} must be {_KIND_NAMES[kind]}, not {value!r}")


_KIND_NAMES: dict[object, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    Path: "a path (string)",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse(kind: object, raw: str, name: str) -> object:
    try:
        if kind is Path:
            return Path(raw)
        if kind is float:
            return float(raw)
        if kind is int:
            return int(raw)
        if kind is bool:
            if raw.lower() in _TRUE | _FALSE:
                return raw.lower() in _TRUE
            raise ValueError(raw)
        if kind is str:
            return raw
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not {_KIND_NAMES[kind]}") from None
    raise TypeError(f"{name}: settings of type {kind!r} are not supported")
