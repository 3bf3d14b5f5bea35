"""The agent's version as its Hello reports it (the dashboard's Runtimes page shows it)."""

from __future__ import annotations

import contextlib
import importlib.metadata


def package_version() -> str:
    """The installed distribution's version: truerun-runtime on a device, truerun where the
    agent comes with the server; "unknown" when neither is installed (a source checkout)."""
    for distribution in ("truerun-runtime", "truerun"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(distribution)
    return "unknown"


AGENT_VERSION = f"truerun-agent/{package_version()}"
