"""`-o text|json|yaml` on the run commands that read: the same data as JSON or YAML (the
API's field names, as google.protobuf's JSON mapping spells them) for scripts."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

FORMATS = ("text", "json", "yaml")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="text", help="text, or the data as json|yaml"
    )


def print_data(data: dict[str, Any], output: str) -> None:
    """``data`` as JSON (indented, keys sorted) or YAML."""
    if output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(yaml.safe_dump(data, sort_keys=True, allow_unicode=True), end="")
