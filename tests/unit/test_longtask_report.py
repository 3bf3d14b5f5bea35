"""A long task's Markdown report is an export, never state (seed C: "Rendered Markdown
reports are asserted to be write-only exports that no code path reads back"): only the
export RPC renders one, nothing in the product parses Markdown or imports the renderer to
read, and no request takes a report in."""

from __future__ import annotations

import ast
from pathlib import Path

from truerun.v1 import long_task_service_pb2 as lt

ROOT = Path(__file__).resolve().parents[2]
PRODUCT: tuple[str, ...] = ("automations", "capacity", "coordinator", "gateway", "kernel")
PRODUCT += ("longtasks", "reconciler", "services", "truerun_runtime")


def _imports_of_report(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "longtasks.service.report":
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "longtasks.service.report"]
    return found


def test_only_the_export_rpc_renders_a_report_and_nothing_reads_one() -> None:
    users = {
        p.relative_to(ROOT).as_posix(): _imports_of_report(p)
        for package in PRODUCT
        for p in sorted((ROOT / package).rglob("*.py"))
        if _imports_of_report(p)
    }
    assert users == {"longtasks/api/people.py": ["render"]}
    # and the renderer itself only writes: it calls no parser
    tree = ast.parse((ROOT / "longtasks/service/report.py").read_text())
    called = {
        c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
    }
    assert not called & {"loads", "load", "parse", "read_text", "open", "display_json"}


def test_no_request_takes_a_report_in() -> None:
    # the only message carrying Markdown is the export's answer
    carriers = [
        name
        for name, message in lt.DESCRIPTOR.message_types_by_name.items()
        for field in message.fields
        if "markdown" in field.name or "report" in field.name
    ]
    assert carriers == ["ExportLongTaskResponse"]
