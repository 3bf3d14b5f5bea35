"""The reference agent's settings (one frozen object, built once by the CLI or a test)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from truerun.v1 import capacity_service_pb2 as cpb

from truerun_runtime import Backoff, StartJournal, TlsFiles
from truerun_runtime._tls import HTTPS

INSTANCE_FILE = "instance_id"
STARTS_FILE = "starts.jsonl"


@dataclass(frozen=True)
class AgentConfig:
    server: str
    """truerun's gRPC address, host:port (without https://: ``credentials`` say TLS)."""
    token: str
    """The runtime token (a secret; sent in Hello only, never given to commands)."""
    owner_id: str
    """The owner whose runs this runtime executes."""
    state_dir: Path
    """Tasks, logs, handles, the outbox and the local socket live here (mode 0700)."""
    limit: int = 1
    """D: the hard cap of concurrently running commands, manual tasks included."""
    instance_id: str = ""
    """The runtime instance id; empty: a stable id stored in the state dir (generated once,
    with the Start journal that lets Inspect answer NEVER_RECEIVED; a configured id may outlive
    a wiped state dir, so with one Inspect never answers NEVER_RECEIVED)."""
    lineage: str = ""
    """Hello's lineage: set only where at most one instance of it runs at a time and a task
    cannot outlive its instance (a container whose processes die with it); empty: none."""
    labels: tuple[str, ...] = ()
    """Labels reported in heartbeats (matched against runs' required labels)."""
    routes: tuple[str, ...] = ()
    """Routes as "device_id[:kind]"; empty: one route named after the instance, kind "stream"."""
    default_grace_ms: int = 5000
    """SIGTERM -> SIGKILL grace when Cancel (or a timeout) does not give one."""
    poll_s: float = 0.05
    """How often a task's files (handle, status, log) are looked at."""
    launch_timeout_s: float = 30.0
    """After a restart, how long a launch whose supervisor left no trace (no supervisor.json,
    no handle) is waited for before it is abandoned and launched again (the agent may have
    died while starting it)."""
    output_chunk_bytes: int = 4096
    """At most this much output per OUTPUT event."""
    output_chunks_per_tick: int = 2
    """At most this many OUTPUT events per task per poll (the rate bound)."""
    output_max_backlog: int = 64 * 1024
    """Unsent output beyond this is skipped in events (the log file keeps it)."""
    fsync: bool = True
    """fsync every outbox and Start journal write (off only for tests on throwaway dirs)."""
    backoff: Backoff = field(default_factory=Backoff)
    """Reconnect backoff."""
    keepalive_ms: int = 30_000
    """gRPC keepalive ping interval (how fast a dead connection is noticed)."""
    self_fence_after_ms: int = 0
    """Self-fencing for Starts that name none: a task's command is stopped once truerun was
    unreachable this long (0: never). Keep truerun's lost_after above it plus a margin."""
    retention_s: float = 7 * 24 * 3600
    """Finished, fully acknowledged tasks older than this are deleted when the agent starts."""
    credentials: grpc.ChannelCredentials | None = None
    """TLS (and mTLS) credentials from truerun_runtime.channel_target; None: plaintext."""
    tls_files: TlsFiles = field(default_factory=TlsFiles)
    """The PEM files ``credentials`` were built from, handed on to a long task's step driver
    (which talks to truerun itself); empty with ``credentials``: the system's trust store."""
    secrets_dir: Path | None = None
    """Where secrets named by ``{"secret_ref": NAME}`` live (one file each); None: the state
    dir's ``secrets``. ``TRUERUN_SECRET_<NAME>`` in the agent's environment wins."""

    def resolved_instance_id(self, on_birth: Callable[[str], None] | None = None) -> str:
        """The configured id, else the one stored in the state dir (created once).

        ``on_birth(id)`` runs when an id is generated, before it is stored (so before it is
        ever used): what must live exactly as long as the id (the Start journal) starts there.
        """
        if self.instance_id:
            return self.instance_id
        path = self.state_dir / INSTANCE_FILE
        try:
            stored = path.read_text().strip()
        except FileNotFoundError:
            stored = ""
        if not stored:
            stored = f"rt-{uuid.uuid4()}"
            if on_birth is not None:
                on_birth(stored)
            tmp = path.with_suffix(".tmp")
            with tmp.open("w") as handle:
                handle.write(stored + "\n")
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            tmp.replace(path)
        return stored

    def resolved_identity(self) -> tuple[str, StartJournal]:
        """The instance id and its Start journal, which proves "never received" only where it
        covers the id's whole life: a generated id's journal is created with the id (before
        the id is stored); a generated id stored before journals existed has none, and a
        configured id may have lived in another (wiped) state dir, so neither proves anything
        (Inspect answers NOT_FOUND, and nothing is written per Start)."""
        path = self.state_dir / STARTS_FILE
        born: list[StartJournal] = []

        def birth(new_id: str) -> None:
            born.append(StartJournal.create(path, new_id, fsync=self.fsync))

        instance_id = self.resolved_instance_id(birth)
        if born:
            return instance_id, born[0]
        if self.instance_id:
            return instance_id, StartJournal(path, instance_id, proof=False, fsync=self.fsync)
        return instance_id, StartJournal.load(path, instance_id, may_prove=True, fsync=self.fsync)

    def server_env(self) -> dict[str, str]:
        """How a process the agent starts reaches truerun itself (a long task's step driver):
        TRUERUN_SERVER and the TLS files, never the runtime token (the agent drops the TLS
        variables it inherited, so the child dials exactly as the agent does)."""
        files = self.tls_files
        plain_target = self.credentials is None or files.given
        env = {"TRUERUN_SERVER": self.server if plain_target else HTTPS + self.server}
        for name, path in zip(
            files.names, (files.ca_file, files.cert_file, files.key_file), strict=True
        ):
            if path:
                env[name] = str(Path(path).resolve())
        return env

    def route_protos(self, instance_id: str) -> list[cpb.Route]:
        specs = self.routes or (f"{instance_id}:stream",)
        routes = []
        for spec in specs:
            device_id, _, kind = spec.partition(":")
            routes.append(cpb.Route(device_id=device_id, kind=kind))
        return routes
