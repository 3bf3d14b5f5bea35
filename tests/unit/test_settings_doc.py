"""docs/operations.md's settings table is exactly the one generated from Settings."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from kernel.config import Settings
from kernel.config_doc import HEADER, markdown_table

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _documented_table() -> str:
    lines = OPERATIONS.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def test_operations_table_matches_settings() -> None:
    assert _documented_table() == markdown_table(), (
        "docs/operations.md's settings table is stale: replace it with the output of "
        "`python -m kernel.config_doc`"
    )


def test_the_table_has_one_row_per_setting() -> None:
    rows = markdown_table().splitlines()[2:]
    assert len(rows) == len(fields(Settings))
    assert any(
        row.startswith("| `TRUERUN_DATABASE_URL` or `TRUERUN_DATABASE_URL_FILE` ") for row in rows
    )
