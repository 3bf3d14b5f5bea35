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


RENDERERS = ("longtasks.service.report", "longtasks.service.report_html")


def _imports_of_report(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in RENDERERS:
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in RENDERERS]
    return found


def test_only_the_export_rpc_renders_a_report_and_nothing_reads_one() -> None:
    users = {
        p.relative_to(ROOT).as_posix(): _imports_of_report(p)
        for package in PRODUCT
        for p in sorted((ROOT / package).rglob("*.py"))
        if _imports_of_report(p)
    }
    assert users == {"longtasks/api/people.py": ["render", "render_html"]}
    # and the renderers themselves only write: they call no parser
    for renderer in ("report.py", "report_html.py"):
        tree = ast.parse((ROOT / "longtasks/service" / renderer).read_text())
        called = {
            c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
            for c in ast.walk(tree)
            if isinstance(c, ast.Call)
        }
        assert not called & {"loads", "load", "parse", "read_text", "open", "display_json"}
        assert not called & {"unescape", "HTMLParser", "feed"}


def test_no_request_takes_a_report_in() -> None:
    # the only message carrying Markdown is the export's answer
    carriers = {
        name
        for name, message in lt.DESCRIPTOR.message_types_by_name.items()
        for field in message.fields
        if "markdown" in field.name or "report" in field.name or field.name == "html"
    }
    assert carriers == {"ExportLongTaskResponse"}
