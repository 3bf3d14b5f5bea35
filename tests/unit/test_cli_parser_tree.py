"""The whole `truerun` parser tree, walked: every client command (one that talks to a server:
it takes --server) has ``-o text|json|yaml``, and every flag and argument of every command
has help text. A command added without either fails here, not in a user's script."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from services.cli.main import _parser
from truerun_runtime.agent.cli import _parser as agent_parser

#: The processes truerun runs as: they serve, they do not read or print resources.
SERVERS = {"dev", "migrate", "gateway", "reconciler", "coordinator", "capacity", "agent"}


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every leaf command as (its words, its parser)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _commands(child, (*path, name))


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: a for a in parser._actions for opt in a.option_strings}


COMMANDS = dict(_commands(_parser()))


def test_the_walk_sees_the_commands() -> None:
    words = {" ".join(path) for path in COMMANDS}
    assert {"ls", "show", "logs", "watch", "submit", "resolve"} <= words
    assert {"task show", "task events", "task act", "schedule ls", "schedule fire"} <= words
    assert len(words) > 40, sorted(words)


def test_every_client_command_has_output_formats() -> None:
    lacking = []
    for path, parser in COMMANDS.items():
        flags = _flags(parser)
        if path[0] in SERVERS:
            assert "--server" not in flags, path  # a server command would be missed here
            continue
        assert "--server" in flags and "--token" in flags, path
        output = flags.get("-o")
        if output is None or output is not flags.get("--output"):
            lacking.append(" ".join(path))
        elif tuple(output.choices or ()) != ("text", "json", "yaml") or output.default != "text":
            lacking.append(f"{' '.join(path)} ({output.choices})")
    assert not lacking, f"client commands without -o text|json|yaml: {lacking}"


def test_every_flag_and_argument_has_help() -> None:
    agent = {("agent", *path): p for path, p in _commands(agent_parser("truerun agent"))}
    assert ("agent", "status") in agent  # its own parser (truerun_runtime/agent/cli.py)
    lacking = [
        f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in {**COMMANDS, **agent}.items()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and not (action.help and action.help.strip())
        and action.help != argparse.SUPPRESS
    ]
    assert not lacking, f"without help text: {lacking}"


def test_every_group_of_commands_says_what_each_is() -> None:
    def groups(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:  # type: ignore[type-arg]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                yield action
                for child in action.choices.values():
                    yield from groups(child)

    lacking = [
        name
        for action in groups(_parser())
        for name in action.choices
        if not any(c.dest == name and c.help for c in action._choices_actions)
    ]
    assert not lacking, f"commands without a help line: {lacking}"
