"""`truerun ls` against a real ``truerun dev`` (SQLite), in process: the header and rows with
their times, the filters (--state, --owner, --agent, --task, --text, --since, --until), the
``more`` hint on stderr, and the same listing as JSON and YAML; `truerun show` as text, JSON
and YAML."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
import yaml
from truerun.v1 import run_service_pb2

from services.cli.main import main
from tests.e2e.conftest import OWNER, Live

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("live", ["sqlite"], indirect=True)
def test_ls_filters_times_more_hint_and_formats(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [live.submit("true", task=f"ls-job-{i}") for i in range(3)]  # no agent: all queued
    base = ["ls", "--server", live.address, "--token", live.api_token, "--project", "e2e"]

    def ls(*args: str) -> tuple[list[str], str]:
        assert main([*base, *args]) == 0
        out, err = capsys.readouterr()
        return out.splitlines(), err

    rows, err = ls()
    assert rows[0].split() == ["RUN", "TASK", "STATE"] and err == ""
    assert [row.split()[0] for row in rows[1:]] == ids[::-1]  # newest first
    assert all(" queued" in row and "created " in row and " ago)" in row for row in rows[1:])

    rows, err = ls("--limit", "2")
    assert [row.split()[0] for row in rows[1:]] == ids[:0:-1]
    assert err.startswith("more: 2 shown; --limit 4") and err.count("\n") == 1

    assert ls("--state", "running")[0] == rows[:1]  # the header alone
    assert len(ls("--state", "running", "--state", "queued")[0]) == 4
    assert ls("--owner", "nobody-else")[0] == rows[:1]
    assert len(ls("--since", "1h")[0]) == 4
    later = (datetime.now() + timedelta(minutes=5)).isoformat(timespec="seconds")
    assert ls("--since", later)[0] == rows[:1]

    # the server's filters: task, text (any case), agent, and the creation time range
    assert [row.split()[0] for row in ls("--task", "ls-job-1")[0][1:]] == [ids[1]]
    assert [row.split()[0] for row in ls("--text", "JOB-2")[0][1:]] == [ids[2]]
    assert ls("--task", "ls-job")[0] == rows[:1]  # a task is matched whole
    assert len(ls("--until", later)[0]) == 4
    assert ls("--until", "1h")[0] == rows[:1]
    middle = live.get(ids[1]).create_time.ToDatetime().astimezone().isoformat()
    assert [row.split()[0] for row in ls("--until", middle)[0][1:]] == [ids[0]]
    assert [row.split()[0] for row in ls("--since", middle)[0][1:]] == ids[:0:-1]
    assert main([*base, "--text", "bad\x00text"]) == 2  # one line, no traceback
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err

    listed = json.loads("\n".join(ls("-o", "json", "--limit", "2")[0]))
    assert [run["id"] for run in listed["runs"]] == ids[:0:-1] and listed["more"] is True
    assert listed["runs"][0]["displayState"] == "DISPLAY_STATE_QUEUED"
    as_yaml = yaml.safe_load("\n".join(ls("-o", "yaml")[0]))
    assert as_yaml == json.loads("\n".join(ls("-o", "json")[0])) and len(as_yaml["runs"]) == 3

    # --agent: a run of an agent (created last: the listings above are of the three)
    agent_run = live.runs.CreateRun(
        run_service_pb2.CreateRunRequest(
            project_id="e2e", owner_id=OWNER, task_id="ls-agent", agent_id="ls-agent-1"
        ),
        timeout=10,
    ).run.id
    assert [row.split()[0] for row in ls("--agent", "ls-agent-1")[0][1:]] == [agent_run]
    assert ls("--agent", "nobody")[0] == rows[:1]

    # show: text, and the run with its events as JSON and YAML
    show = ["show", "--server", live.address, "--token", live.api_token, ids[0]]
    assert main(show) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"run        {ids[0]}") and "run.created" in text
    assert main([*show, "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["id"] == ids[0] and shown["events"][0]["type"] == "run.created"
    assert main([*show, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == shown
