"""The reference agent's Hello names its installed package's version (the Runtimes page
shows it), not a constant that drifts from the release."""

from __future__ import annotations

import importlib.metadata

from truerun_runtime.agent.version import AGENT_VERSION


def test_agent_version_is_the_installed_package_version() -> None:
    try:
        expected = importlib.metadata.version("truerun-runtime")
    except importlib.metadata.PackageNotFoundError:  # installed with the server
        expected = importlib.metadata.version("truerun")
    assert AGENT_VERSION == f"truerun-agent/{expected}"
