"""The peers' venv (bench/venv.py): dbos and procrastinate as pinned in requirements.txt here,
in ``.venv/bench-peers`` (``TRUERUN_BENCH_PEERS_VENV`` names another directory)."""

from __future__ import annotations

import os
from pathlib import Path

from bench.venv import ROOT, ensure_venv

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
# under .venv/: ignored by git, ruff and mypy, and removed by `make clean` with the rest
DEFAULT_DIR = ROOT / ".venv" / "bench-peers"


def env_dir() -> Path:
    return Path(os.environ.get("TRUERUN_BENCH_PEERS_VENV") or DEFAULT_DIR)


def peers_python(log: bool = True) -> Path:
    return ensure_venv(env_dir(), REQUIREMENTS, log)
