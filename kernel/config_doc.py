"""The settings table in docs/operations.md, generated from `Settings` so that it cannot drift
(a test compares them). `python -m kernel.config_doc` prints it."""

from __future__ import annotations

from dataclasses import MISSING, fields

from kernel.config import Settings, env_name, is_secret

HEADER = "| variable | config file key | default | what it is |"


def markdown_table() -> str:
    rows = [HEADER, "|---|---|---|---|"]
    for f in fields(Settings):
        name = env_name(f)
        if is_secret(f):
            variable = f"`{name}` or `{name}_FILE`"
            key = "— (secret: never in the file)"
        else:
            variable, key = f"`{name}`", f"`{f.name}`"
        default = "" if f.default is MISSING else str(f.default)
        shown = f"`{default}`" if default else "(empty)"
        help_text = str(f.metadata.get("help", "")).replace("|", "\\|")
        rows.append(f"| {variable} | {key} | {shown} | {help_text} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
