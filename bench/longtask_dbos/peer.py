"""The peer's side: a DBOS workflow whose one ``@DBOS.step`` makes a non-idempotent effect
at the effect fixture. Run only by bench's own DBOS environment (bench/longtask_dbos/env.py),
never by the project's venv, which has no dbos:

    <peer python> -m bench.longtask_dbos.peer start   --sysdb F --url U --workflow-id W
    <peer python> -m bench.longtask_dbos.peer recover --sysdb F --workflow-id W

``start`` launches DBOS and starts workflow W (the harness kills it while the step waits for
the fixture's answer); ``recover`` launches DBOS on the same system database, which recovers
the pending workflow W as DBOS does at launch, waits for it to end and prints one JSON line
``{"workflow_id", "status", "result"}``. Standard library + dbos only.

dbos is imported by name at run time: the project's type check runs where dbos is not
installed, so its decorators are applied as plain calls on an ``Any``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import urllib.request
from typing import Any

APP_NAME = "truerun-bench-longtask"
STEP_TIMEOUT_S = 120.0  # the step's own HTTP timeout: the harness must kill well before it


def post_effect(url: str, key: str, target: str) -> dict[str, Any]:
    """The step body: one POST, non-idempotent at the fixture (no idempotent mode asked)."""
    body = json.dumps({"key": key, "target": target, "summary": f"dbos step for {key}"})
    request = urllib.request.Request(
        url.rstrip("/") + "/effects",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=STEP_TIMEOUT_S) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return {"external_id": answer["id"], "target": answer["target"], "at_ms": answer["at_ms"]}


def _dbos() -> Any:
    return importlib.import_module("dbos").DBOS


def register() -> tuple[Any, Any]:
    """(the workflow, DBOS): decorated before launch, the same in both modes, so the
    application version DBOS derives from the registered code is the same and recovery
    picks the workflow up."""
    dbos = _dbos()
    step = dbos.step()(post_effect)

    def effect_workflow(url: str, key: str, target: str) -> dict[str, Any]:
        receipt: dict[str, Any] = step(url, key, target)
        return receipt

    return dbos.workflow()(effect_workflow), dbos


def launch(dbos: Any, sysdb: str) -> None:
    config = {
        "name": APP_NAME,
        "system_database_url": f"sqlite:///{sysdb}",
        "log_level": "WARNING",
    }
    dbos(config=config)
    dbos.launch()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.longtask_dbos.peer")
    parser.add_argument("mode", choices=["start", "recover"])
    parser.add_argument("--sysdb", required=True, help="the SQLite system database file")
    parser.add_argument("--workflow-id", required=True)
    parser.add_argument("--url", default="", help="the effect fixture (start)")
    parser.add_argument("--target", default="peer-target")
    args = parser.parse_args(argv)
    workflow, dbos = register()
    launch(dbos, args.sysdb)
    set_id = importlib.import_module("dbos").SetWorkflowID
    if args.mode == "start":
        with set_id(args.workflow_id):
            handle = dbos.start_workflow(workflow, args.url, args.workflow_id, args.target)
        print(json.dumps({"started": args.workflow_id}), flush=True)
    else:
        # DBOS.launch() has re-enqueued this executor's pending workflows; wait for ours
        handle = dbos.retrieve_workflow(args.workflow_id)
    result = handle.get_result()
    status = handle.get_status().status
    print(json.dumps({"workflow_id": args.workflow_id, "status": status, "result": result}))
    sys.stdout.flush()
    dbos.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
