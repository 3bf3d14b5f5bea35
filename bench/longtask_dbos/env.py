"""Bench's own environment for the peer: a venv of its own with ``requirements.txt``, made on
first use and remade when that file changes. The project's venv never imports dbos (its
SQLAlchemy, psycopg and the rest stay out of the product's dependency set); the harness runs
in the project's venv and starts the peer with this venv's python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
# under .venv/: ignored by git, ruff and mypy, and removed by `make clean` with the rest
DEFAULT_DIR = ROOT / ".venv" / "bench-longtask-dbos"
STAMP = ".requirements"
INSTALL_TIMEOUT_S = 600


def env_dir() -> Path:
    return Path(os.environ.get("TRUERUN_BENCH_DBOS_VENV") or DEFAULT_DIR)


def peer_python(log: bool = True) -> Path:
    """The venv's python, after making the venv if it is missing or stale."""
    venv = env_dir()
    python = venv / "bin" / "python"
    wanted = REQUIREMENTS.read_text()
    stamp = venv / STAMP
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if log:
        print(f"setting up the peer's environment in {venv} ({REQUIREMENTS.name})", flush=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    _run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)])
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
