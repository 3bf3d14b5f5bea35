"""`-o text|json|yaml` on every client command, in one place: the same data as JSON or YAML
(the API's field names, as google.protobuf's JSON mapping spells them) for scripts.

A read prints what it read (``ls``: ``{"runs": [...], "more": ...}``); a write prints the
resource it made or changed (``submit``: ``{"run": ..., "existing": ...}``), so a script can
chain commands (``truerun submit job -o json | jq -r .run.id``). The two that stream
(``watch``, ``logs``) print one item at a time as it comes: JSON Lines (one object per line)
or one YAML document per item.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

FORMATS = ("text", "json", "yaml")
Data = Message | Mapping[str, Any] | Sequence[Any]


def add_output_flag(parser: argparse.ArgumentParser, what: str = "the data") -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="text",
        help=f"text for people (default), or {what} as json or yaml for scripts",
    )


def plain(data: Data) -> Any:
    """``data`` as plain JSON values: messages through the protobuf JSON mapping."""
    if isinstance(data, Message):
        return json_format.MessageToDict(data)
    if isinstance(data, Mapping):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [plain(v) for v in data]
    return data


def print_data(data: Data, output: str) -> None:
    """``data`` as JSON (indented, keys sorted) or YAML."""
    shown = plain(data)
    if output == "json":
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        print(yaml.safe_dump(shown, sort_keys=True, allow_unicode=True), end="")


def emit(output: str, data: Data, text: str) -> None:
    """``text`` for people, else ``data`` in the format asked for."""
    if output == "text":
        print(text)
    else:
        print_data(data, output)


def stream_item(data: Data, output: str) -> str:
    """One item of a stream as the text to write: a JSON line, or a YAML document."""
    shown = plain(data)
    if output == "json":
        return json.dumps(shown, sort_keys=True) + "\n"
    return "---\n" + yaml.safe_dump(shown, sort_keys=True, allow_unicode=True)
