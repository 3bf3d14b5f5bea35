"""Settings of every truerun process: one frozen object, read once from TRUERUN_* variables.

CLI flags mirror these variables (the flag wins); `docs/operations.md` lists them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = field(
        default=Path(".truerun"),
        metadata={"env": "TRUERUN_DATA_DIR", "help": "where the embedded SQLite database lives"},
    )
    database_url: str = field(
        default="",
        metadata={
            "env": "TRUERUN_DATABASE_URL",
            "help": "postgresql://... or sqlite:///path; empty = SQLite in the data dir",
        },
    )
    grpc_addr: str = field(
        default="127.0.0.1:7233",
        metadata={"env": "TRUERUN_GRPC_ADDR", "help": "host:port to serve gRPC on (port 0 = any)"},
    )
    redis_url: str = field(
        default="",
        metadata={
            "env": "TRUERUN_REDIS_URL",
            "help": "redis://... for capacity observations; empty = in-memory (embedded)",
        },
    )
    observation_ttl_ms: int = field(
        default=15_000,
        metadata={
            "env": "TRUERUN_OBSERVATION_TTL_MS",
            "help": "how long a runtime's capacity observation counts without a new heartbeat",
        },
    )
    runtime_tokens: str = field(
        default="",
        metadata={
            "env": "TRUERUN_RUNTIME_TOKENS",
            "help": "owner:token pairs separated by ';' that runtimes authenticate with; "
            "empty in `truerun dev` = one token for any owner, written to DATA_DIR/runtime.token",
        },
    )
    cancel_grace_ms: int = field(
        default=5_000,
        metadata={
            "env": "TRUERUN_CANCEL_GRACE_MS",
            "help": "how long a runtime waits after SIGTERM before SIGKILL when cancelling",
        },
    )
    lease_ttl_ms: int = field(
        default=30_000,
        metadata={
            "env": "TRUERUN_LEASE_TTL_MS",
            "help": "claim lease, renewed by the runtime's heartbeats; past it without a "
            "heartbeat an unstarted claim is requeued and a started attempt shows unknown",
        },
    )
    lost_after_ms: int = field(
        default=0,
        metadata={
            "env": "TRUERUN_LOST_AFTER_MS",
            "help": "how long a runtime may stay silent before its unknown attempts are declared "
            "lost by policy (0 = never: a person decides); keep it above the runtimes' "
            "self_fence_after plus a margin, or a replacement may overlap the original",
        },
    )
    metrics_addr: str = field(
        default="127.0.0.1:0",
        metadata={
            "env": "TRUERUN_METRICS_ADDR",
            "help": "host:port of the Prometheus /metrics endpoint (port 0 = any)",
        },
    )
    grace_seconds: float = field(
        default=10.0,
        metadata={"env": "TRUERUN_GRACE_SECONDS", "help": "how long shutdown waits for calls"},
    )

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'truerun.db').resolve()}"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(str(f.metadata["env"]))
            if raw is not None and raw != "":
                values[f.name] = _parse(f.type, raw, str(f.metadata["env"]))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _parse(kind: object, raw: str, name: str) -> object:
    try:
        if kind in (Path, "Path"):
            return Path(raw)
        if kind in (float, "float"):
            return float(raw)
        if kind in (int, "int"):
            return int(raw)
        return raw
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not valid") from None
