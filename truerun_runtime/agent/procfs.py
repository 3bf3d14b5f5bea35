"""Process identity from /proc, durable handles and atomic files (Linux; stdlib only, because
the supervisor imports it and must start fast).

A PID alone proves nothing: it is reused. A durable handle is {pid, start ticks (field 22 of
/proc/<pid>/stat), boot id, pgid}; a process is "ours" only while all four still match. No
signal is ever sent to a process group whose handle does not match (seed B §13.2).
"""

from __future__ import annotations

import enum
import json
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class ProcStat:
    state: str
    pgid: int
    start_ticks: int


class Proof(enum.Enum):
    """What a handle proves about its process."""

    ALIVE = "alive"  # the same process, running
    EXITED = "exited"  # the same process, ended but not yet reaped by its supervisor
    GONE = "gone"  # no such process, or another one now has the pid: nothing to signal


def boot_id() -> str:
    return BOOT_ID_PATH.read_text().strip()


def read_stat(pid: int) -> ProcStat | None:
    """The fields of /proc/<pid>/stat that identify a process; None when there is none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(state=fields[0], pgid=int(fields[2]), start_ticks=int(fields[19]))


def identity(pid: int) -> dict[str, Any]:
    """The handle fields of a live process: pid, pgid, start ticks, boot id."""
    stat = read_stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    return {"pid": pid, "pgid": stat.pgid, "start_ticks": stat.start_ticks, "boot_id": boot_id()}


def prove(handle: Mapping[str, Any]) -> Proof:
    """Whether the process named by ``handle`` is still that process (all four fields)."""
    try:
        pid, pgid = int(handle["pid"]), int(handle["pgid"])
        ticks, boot = int(handle["start_ticks"]), str(handle["boot_id"])
    except (KeyError, TypeError, ValueError):
        return Proof.GONE
    if pid <= 1 or pgid <= 1 or boot != boot_id():
        return Proof.GONE
    stat = read_stat(pid)
    if stat is None or stat.start_ticks != ticks or stat.pgid != pgid:
        return Proof.GONE
    return Proof.EXITED if stat.state in ("Z", "X", "x") else Proof.ALIVE


def signal_group(handle: Mapping[str, Any], signum: int) -> bool:
    """Send ``signum`` to the handle's process group, only if the handle proves it is ours.

    False means nothing was sent: the process is gone, or cannot be proven to be ours.
    """
    if prove(handle) is not Proof.ALIVE:
        return False
    try:
        os.killpg(int(handle["pgid"]), signum)
    except ProcessLookupError:
        return False
    return True


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist (yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def _write_temp(path: Path, data: Mapping[str, Any]) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(dict(data), sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` all at once (temp file, fsync, rename, fsync dir)."""
    tmp = _write_temp(path, data)
    os.replace(tmp, path)
    _sync_dir(path.parent)


def create_json_exclusive(path: Path, data: Mapping[str, Any]) -> bool:
    """Create ``path`` with ``data`` all at once, only if it does not exist; False if it did.

    Two parties racing for the same path (the supervisor writing a handle, the agent
    abandoning a launch) get exactly one winner.
    """
    tmp = _write_temp(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    _sync_dir(path.parent)
    return True
