"""Bench's own environment for the peer: a venv of its own with ``requirements.txt``, made on
first use and remade when that file changes (bench/venv.py). The project's venv never imports
dbos (its SQLAlchemy, psycopg and the rest stay out of the product's dependency set); the
harness runs in the project's venv and starts the peer with this venv's python."""

from __future__ import annotations

import os
from pathlib import Path

from bench.venv import ROOT, ensure_venv, installed_version

__all__ = ["ROOT", "env_dir", "installed_version", "peer_python"]

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
# under .venv/: ignored by git, ruff and mypy, and removed by `make clean` with the rest
DEFAULT_DIR = ROOT / ".venv" / "bench-longtask-dbos"


def env_dir() -> Path:
    return Path(os.environ.get("TRUERUN_BENCH_DBOS_VENV") or DEFAULT_DIR)


def peer_python(log: bool = True) -> Path:
    """The venv's python, after making the venv if it is missing or stale."""
    return ensure_venv(env_dir(), REQUIREMENTS, log)
