"""The house's floors, checked from the code (docs/architecture.md).

Prints the import graph between truerun's top-level packages and fails (exit 1) when an
import goes up a floor or sideways into a cycle, when a module outside a table's owner
writes that table, or when a module reaches the run store's writes around the one door
(coordinator/service/transitions.py, with door_tx.py and door_rows.py). `make lint` runs it;
tests/unit/test_architecture.py keeps it true.

    python scripts/architecture.py
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A package may import its own floor's package and any lower floor, never a
#: higher one; two packages on one floor may not import each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("truerun",),  # generated protobuf code (protos/gen)
    ("truerun_runtime",),  # the runtime side: SDK and reference agent, installs alone
    ("kernel",),  # ids, clock, settings, TLS, telemetry, schema, errors, observation
    ("coordinator",),  # runs and attempts: the domain, the one write door, its stores
    ("capacity", "automations", "longtasks"),  # claims; schedules; long tasks over runs
    ("reconciler", "gateway"),  # background scans; REST/SSE in front of the services
    ("services",),  # the roof: one module per deployable process, the CLI, the wiring
)
FLOOR_OF = {package: level for level, names in enumerate(FLOORS) for package in names}
#: Where the code lives on disk (the generated package sits under protos/gen).
SOURCES = {name: ROOT / name for name in FLOOR_OF} | {
    "truerun": ROOT / "protos" / "gen" / "truerun"
}

#: Tables and the only folders whose modules may write them (migrations aside).
TABLE_WRITERS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            "runs",
            "attempts",
            "run_events",
            "attempt_output",
            "runtime_instances",
            "runtime_bindings",
            "request_log",
            "run_approvals",
        ),
        ("coordinator/store/",),
    ),
    **dict.fromkeys(("agents", "fair_lanes", "fair_clocks"), ("capacity/store/",)),
    **dict.fromkeys(("schedules", "schedule_events"), ("automations/store/",)),
    **dict.fromkeys(
        (
            "long_tasks",
            "long_task_plan_versions",
            "long_task_steps",
            "long_task_criteria",
            "long_task_side_effects",
            "long_task_evidence",
            "long_task_decisions",
            "long_task_attempts",
            "long_task_events",
            "long_task_usage",
            "long_task_actions",
            "run_preflights",
            "long_task_notices",
            "long_task_notice_webhooks",
            "long_task_notice_deliveries",
            "long_task_continuations",
        ),
        ("longtasks/store/",),
    ),
}
_MIGRATIONS = "kernel/db/migrations/"
_TABLES = "|".join(TABLE_WRITERS)
_SQL_WRITE = re.compile(
    rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?({_TABLES})\b", re.IGNORECASE
)


#: The run store's writes (coordinator/store/base.py: what RunStore and RunTx add to their
#: read-only faces RunReader and RunTxReader).
STORE_WRITES = frozenset(
    {
        "apply",
        "apply_all",
        "apply_creates",
        "put_request",
        "transaction",
        "renew_leases",
        "record_lineage",
        "bind_instance",
        "mark_replaced",
        "delete_output",
    }
)
#: The types that carry those writes; a module that names one could hold the store's writes.
STORE_WRITERS = frozenset({"RunStore", "RunTx"})
#: The only modules that may call a store write or name a writer type: the stores, the door,
#: and the composition root (it opens the store and gives it to the door, readers get it as
#: a RunReader). Tests are not checked.
DOOR_KEEPERS = (
    "coordinator/store/",
    "coordinator/service/transitions.py",
    "coordinator/service/door_tx.py",  # the transaction the door hands out (reads only)
    "coordinator/service/door_rows.py",  # the door's rows beside the state machine
    "services/bootstrap.py",
    "services/cli/",
)


def _modules(package: str) -> Iterator[tuple[str, ast.Module]]:
    base = SOURCES[package]
    for path in sorted(base.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def import_graph() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the modules and names behind the arrow."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for package in FLOOR_OF:
        for name, tree in _modules(package):
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets = [node.module]
                else:
                    continue
                for target in targets:
                    top = target.split(".")[0]
                    if top in FLOOR_OF and top != package:
                        edges[(package, top)].append(f"{name} -> {target}")
    return dict(edges)


def floor_violations(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Every arrow that goes up a floor or across one floor (which could close a cycle)."""
    found = []
    for (importer, imported), where in sorted(edges.items()):
        if FLOOR_OF[imported] >= FLOOR_OF[importer]:
            direction = "up" if FLOOR_OF[imported] > FLOOR_OF[importer] else "across"
            found.append(f"{importer} -> {imported} ({direction}): {where[0]}")
    return found


def _sources() -> dict[str, str]:
    """path -> text of every handwritten module of the packages."""
    return {
        name: (ROOT / name).read_text()
        for package in FLOOR_OF
        if package != "truerun"
        for name, _ in _modules(package)
    }


def state_writes(sources: dict[str, str] | None = None) -> list[str]:
    """Modules that write a table they do not own: SQL text in a string, or a SQLAlchemy
    insert/update/delete of the table. ``sources``: path -> text (default: the repo)."""
    if sources is None:
        sources = _sources()
    found = []
    for name, text in sorted(sources.items()):
        if name.startswith(_MIGRATIONS):
            continue
        for table, line in _writes(ast.parse(text)):
            if not name.startswith(TABLE_WRITERS[table]):
                found.append(f"{name}:{line} writes {table}")
    return found


def _writes(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in _SQL_WRITE.finditer(node.value):
                yield match.group(1), node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            verb = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if verb not in ("insert", "update", "delete"):
                continue
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                subject = node.func.value.id  # runs.update()
            elif node.args and isinstance(node.args[0], ast.Name):
                subject = node.args[0].id  # update(runs)
            else:
                continue
            if subject in TABLE_WRITERS:
                yield subject, node.lineno


def door_bypasses(sources: dict[str, str] | None = None) -> list[str]:
    """Modules outside DOOR_KEEPERS that call a store write (a method named like one, on
    anything but the door: an expression ending in ``transitions``, whose methods of those
    names are the door's own) or import a writer type. ``sources``: path -> text."""
    if sources is None:
        sources = _sources()
    found = []
    for name, text in sorted(sources.items()):
        if not name.startswith(DOOR_KEEPERS):
            found += [f"{name}:{line} {what}" for line, what in sorted(_bypasses(ast.parse(text)))]
    return found


def _bypasses(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("coordinator"):
            for alias in node.names:
                if alias.name in STORE_WRITERS:
                    yield node.lineno, f"imports {alias.name}, the store's writer"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STORE_WRITES
            and not _is_the_door(node.func.value)
        ):
            yield node.lineno, f"calls the store's {node.func.attr} around the door"


def _is_the_door(receiver: ast.expr) -> bool:
    """``transitions``, ``self._transitions``, ``app.transitions``: the Transitions object."""
    if isinstance(receiver, ast.Name):
        last = receiver.id
    elif isinstance(receiver, ast.Attribute):
        last = receiver.attr
    else:
        return False
    return last.lstrip("_") == "transitions"


def describe(edges: dict[tuple[str, str], list[str]]) -> str:
    lines = []
    for level in range(len(FLOORS) - 1, -1, -1):
        for package in FLOORS[level]:
            below = sorted(b for a, b in edges if a == package)
            lines.append(f"floor {level} {package:<16} -> {', '.join(below) or '(nothing)'}")
    return "\n".join(lines)


def main() -> int:
    edges = import_graph()
    print(describe(edges))
    problems = floor_violations(edges) + state_writes() + door_bypasses()
    for problem in problems:
        print(f"architecture: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
