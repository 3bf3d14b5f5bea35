"""`truerun agent`: the reference runtime agent under the server's CLI.

The agent itself is ``truerun_runtime.agent`` (floor 1): it installs without the server, in
the truerun-runtime distribution, whose ``truerun-agent`` console script is the same command.
This subcommand only hands it the arguments after ``agent`` (it parses its own flags).
"""

from __future__ import annotations

from collections.abc import Sequence

from truerun_runtime.agent.cli import main as agent_main


def main(argv: Sequence[str]) -> int:
    """``truerun agent ARGS...``: the agent's own CLI with ``ARGS``."""
    return agent_main(list(argv))
