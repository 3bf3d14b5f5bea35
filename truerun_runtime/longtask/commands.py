"""Running a step's shell command (or probe) for the step driver, and the evidence it
leaves: the command, its exit code, and its output as a hash and a size (the output may hold
what must not be stored in clear; the attempt's own output log keeps it)."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from truerun.v1 import long_task_service_pb2 as pb

from .attempt import evidence
from .checkers import sha256_file

SHELL = "/bin/sh"


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def evidence(self, effect_id: str = "") -> pb.EvidenceRef:
        output = (self.stdout + self.stderr).encode()
        return evidence(
            "command",
            self.command,
            f"exit {self.exit_code}",
            render={
                "exit_code": self.exit_code,
                "output_sha256": hashlib.sha256(output).hexdigest(),
                "output_bytes": len(output),
            },
            effect_id=effect_id,
        )


async def run_shell(command: str, *, cwd: Path, env: Mapping[str, str]) -> CommandResult:
    """Runs ``/bin/sh -c command`` to its end; its output is also passed on to this process's
    own (the attempt's output log)."""
    process = await asyncio.create_subprocess_exec(
        SHELL,
        "-c",
        command,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    return CommandResult(
        command, process.returncode if process.returncode is not None else -1, stdout, stderr
    )


def file_evidence(path: Path, effect_id: str = "") -> pb.EvidenceRef:
    """A file-shaped step's evidence: where it is, its size and its sha256."""
    size = path.stat().st_size
    return evidence(
        "file",
        str(path),
        f"{path.name}: {size} bytes",
        render={"size": size, "sha256": sha256_file(path)},
        effect_id=effect_id,
    )
