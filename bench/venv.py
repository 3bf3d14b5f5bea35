"""Bench's own environments: a venv of its own per peer requirements file, made on first use
and remade when that file changes, so the peers' dependencies (dbos's SQLAlchemy and psycopg,
procrastinate's) never enter the project's venv. The harness runs in the project's venv and
starts a peer's processes with the venv's python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = ".requirements"
INSTALL_TIMEOUT_S = 600


def ensure_venv(venv: Path, requirements: Path, log: bool = True) -> Path:
    """The venv's python, after making the venv if it is missing or stale."""
    python = venv / "bin" / "python"
    wanted = requirements.read_text()
    stamp = venv / STAMP
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if log:
        print(f"setting up the peer's environment in {venv} ({requirements.name})", flush=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    _run([str(python), "-m", "pip", "install", "--quiet", "-r", str(requirements)])
    stamp.write_text(wanted)
    return python


def installed_version(python: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
        )
