"""The effect fixture itself (tests/support/effect_fixture.py), as the long-task suites and the
DBOS comparison use it: a real process on loopback, called over HTTP and through its shell
client, killed and restarted on its state file. No sleeps: every wait is a condition polled
against a deadline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import effect_client as client
from tests.support.effect_fixture_process import (
    ROOT,
    FixtureProcess,
    fixture_process,
    wait_for,
    wait_for_effect,
    wait_for_hang_up,
    wait_for_hold,
)


@pytest.fixture
def fixture(tmp_path: Path) -> Iterator[FixtureProcess]:
    with fixture_process(tmp_path / "effects.jsonl") as process:
        yield process


def run_client(
    *args: str, timeout_s: float = 60.0, key_env: str = ""
) -> subprocess.CompletedProcess[str]:
    env = _env()
    env.pop(client.KEY_ENV, None)
    if key_env:
        env[client.KEY_ENV] = key_env
    return subprocess.run(
        [sys.executable, "-m", "tests.support.effect_client", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def start_client(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.effect_client", *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _env() -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def lines(state: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in state.read_text().splitlines()]


def test_every_post_is_one_durable_counted_effect(fixture: FixtureProcess) -> None:
    first = client.post_effect(fixture.url, "k1", "inbox:alice", "mail 1")
    again = client.post_effect(fixture.url, "k1", "inbox:alice", "mail 1")
    other = client.post_effect(fixture.url, "k2", "inbox:bob")
    assert [first["id"], again["id"], other["id"]] == ["eff-000001", "eff-000002", "eff-000003"]
    assert not first["duplicate"] and not again["duplicate"]
    assert other["summary"] == "effect on inbox:bob"

    stats = fixture.stats()
    assert stats["effects"] == 3 and stats["duplicates"] == 0
    assert stats["keys"] == {
        "k1": {"effects": 2, "duplicates": 0},
        "k2": {"effects": 1, "duplicates": 0},
    }
    assert client.effects_of(fixture.url, "k1") == 2
    assert client.effects_of(fixture.url, "never") == 0
    # each effect was on disk before it was answered
    assert [(r["type"], r["id"]) for r in lines(fixture.state)] == [
        ("effect", "eff-000001"),
        ("effect", "eff-000002"),
        ("effect", "eff-000003"),
    ]
    # the query endpoint answers the first effect of a key, 404 for an unknown one
    done, effect = client.probe(fixture.url, "k1")
    assert done == client.PROBE_DONE and effect is not None
    assert effect["id"] == "eff-000001" and effect["target"] == "inbox:alice"
    assert client.probe(fixture.url, "never") == (client.PROBE_NOT_DONE, None)
    status, listing = client.request(fixture.url, "/effects")
    assert status == 200 and [e["id"] for e in listing["effects"]] == [
        "eff-000001",
        "eff-000002",
        "eff-000003",
    ]


def test_idempotent_mode_answers_the_first_effect_again(fixture: FixtureProcess) -> None:
    first = client.post_effect(fixture.url, "k", "t", idempotent=True)
    again = client.post_effect(fixture.url, "k", "t", idempotent=True)
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["id"] == first["id"]
    assert fixture.stats()["keys"]["k"] == {"effects": 1, "duplicates": 1}

    # the switch for every request, as a step whose command cannot send headers needs it
    switches = client.control(fixture.url, idempotent=True)
    assert switches == {"idempotent": True, "withhold": False, "withhold_keys": []}
    third = client.post_effect(fixture.url, "k", "t")
    assert third["duplicate"] and third["id"] == first["id"]
    assert fixture.stats()["keys"]["k"] == {"effects": 1, "duplicates": 2}
    assert [r["type"] for r in lines(fixture.state)] == ["effect", "duplicate", "duplicate"]


def test_withhold_holds_the_answer_while_the_effect_is_visible(fixture: FixtureProcess) -> None:
    caller = start_client(
        "post", "--url", fixture.url, "--key", "held", "--target", "t", "--withhold",
        "--timeout-s", "120",
    )  # fmt: skip
    try:
        effect = wait_for_effect(fixture.url, "held")
        holds = wait_for_hold(fixture.url, "held")["holds"]
        assert holds["open"] == 1 and holds["open_keys"] == ["held"]
        assert caller.poll() is None, "the caller was answered while the fixture withheld"

        assert client.control(fixture.url, release=True)["withhold"] is False
        out, err = caller.communicate(timeout=30)
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
            caller.wait()
    assert caller.returncode == 0, err
    assert json.loads(out) == {
        "external_id": effect["id"],
        "target": "t",
        "summary": "effect on t",
        "at_ms": effect["at_ms"],
    }
    assert fixture.stats()["holds"]["released"] == 1


def test_a_caller_killed_while_held_is_never_answered(fixture: FixtureProcess) -> None:
    client.control(fixture.url, withhold=True)  # the switch: the caller asks nothing special
    caller = start_client("post", "--url", fixture.url, "--key", "k", "--target", "t")
    try:
        wait_for_effect(fixture.url, "k")
        wait_for_hold(fixture.url, "k")
    finally:
        os.killpg(caller.pid, signal.SIGKILL)
        caller.communicate(timeout=30)
    assert caller.returncode == -signal.SIGKILL
    wait_for_hang_up(fixture.url, "k", before=0)
    stats = fixture.stats()
    assert stats["keys"]["k"] == {"effects": 1, "duplicates": 0}
    assert stats["holds"]["released"] == 0 and stats["holds"]["open"] == 0


def test_withhold_keys_hold_only_those_keys(fixture: FixtureProcess) -> None:
    switches = client.control(fixture.url, withhold_keys=["slow"])
    assert switches["withhold_keys"] == ["slow"] and switches["withhold"] is False
    held = start_client("post", "--url", fixture.url, "--key", "slow", "--target", "t")
    try:
        wait_for_hold(fixture.url, "slow")
        # another key is answered at once while "slow" is held
        assert client.post_effect(fixture.url, "quick", "t", timeout_s=30)["id"] == "eff-000002"
        assert held.poll() is None
        client.control(fixture.url, release=True)
        out, err = held.communicate(timeout=30)
    finally:
        if held.poll() is None:
            os.killpg(held.pid, signal.SIGKILL)
            held.wait()
    assert held.returncode == 0 and json.loads(out)["external_id"] == "eff-000001", err
    assert client.control(fixture.url, withhold_keys=[])["withhold_keys"] == []
    assert client.post_effect(fixture.url, "slow", "t", timeout_s=30)["id"] == "eff-000003"


def test_a_held_answer_comes_after_the_hold_time(tmp_path: Path) -> None:
    with fixture_process(tmp_path / "e.jsonl", withhold=True, hold_s=0.2) as fixture:
        answer = client.post_effect(fixture.url, "k", "t", timeout_s=30)
        assert answer["id"] == "eff-000001"
        assert fixture.stats()["holds"]["timed_out"] == 1


def test_the_client_says_no_answer_when_the_caller_times_out(fixture: FixtureProcess) -> None:
    done = run_client(
        "post", "--url", fixture.url, "--key", "k", "--target", "t", "--withhold",
        "--timeout-s", "0.5",
    )  # fmt: skip
    assert done.returncode == client.POST_NO_ANSWER, done
    assert "the effect may have happened" in done.stderr
    wait_for_effect(fixture.url, "k")  # it did
    assert client.effects_of(fixture.url, "k") == 1


def test_probe_exit_codes(fixture: FixtureProcess) -> None:
    client.post_effect(fixture.url, "there", "t")
    found = run_client("probe", "--url", fixture.url, "--key", "there")
    assert found.returncode == client.PROBE_DONE and json.loads(found.stdout)["key"] == "there"
    assert run_client("probe", "--url", fixture.url, "--key", "absent").returncode == 1
    with socket.socket() as unused:  # bound, never listening: connection refused
        unused.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{unused.getsockname()[1]}"
        assert run_client("probe", "--url", nowhere, "--key", "there").returncode == 2
        assert (
            run_client("post", "--url", nowhere, "--key", "k", "--target", "t").returncode
            == client.POST_NO_ANSWER
        )


def test_the_key_comes_from_the_step_drivers_variable(fixture: FixtureProcess) -> None:
    posted = run_client("post", "--url", fixture.url, "--target", "t", key_env="step-key")
    assert posted.returncode == 0, posted
    assert json.loads(posted.stdout)["external_id"] == "eff-000001"
    assert client.effects_of(fixture.url, "step-key") == 1
    probed = run_client("probe", "--url", fixture.url, key_env="step-key")
    assert probed.returncode == client.PROBE_DONE, probed
    missing = run_client("post", "--url", fixture.url, "--target", "t")
    assert missing.returncode == 2 and "--key is required" in missing.stderr


def test_bad_requests_are_refused_and_change_nothing(fixture: FixtureProcess) -> None:
    client.post_effect(fixture.url, "k", "t")
    before = fixture.stats()
    for body in (
        {"target": "t"},
        {"key": "", "target": "t"},
        {"key": "k"},
        {"key": 1, "target": "t"},
    ):
        status, answer = client.request(fixture.url, "/effects", body)
        assert status == 400 and "non-empty string" in answer["error"], (body, answer)
    for switches in ({"withhold": "yes"}, {"withhold_keys": "k"}, {"withhold_keys": [""]}):
        status, _ = client.request(fixture.url, "/control", switches)
        assert status == 400, switches
    assert client.control(fixture.url)["withhold_keys"] == []
    status, _ = client.request(
        fixture.url, "/effects", {"key": "k", "target": "t", "x": "y" * 70_000}
    )
    assert status == 413
    refused = run_client("post", "--url", fixture.url, "--key", "k", "--target", "")
    assert refused.returncode == client.POST_REFUSED and "HTTP 400" in refused.stderr
    assert fixture.stats() == before
    assert len(lines(fixture.state)) == 1


def test_effects_survive_a_kill_of_the_fixture(tmp_path: Path) -> None:
    state = tmp_path / "effects.jsonl"
    with fixture_process(state) as fixture:
        client.post_effect(fixture.url, "a", "t")
        client.post_effect(fixture.url, "a", "t")
        client.post_effect(fixture.url, "b", "t", idempotent=True)
        client.post_effect(fixture.url, "b", "t", idempotent=True)
        before = fixture.stats()
    # fixture_process ended it with SIGKILL; a new process reads the same file
    with fixture_process(state) as restarted:
        after = restarted.stats()
        assert {k: after[k] for k in ("effects", "duplicates", "keys")} == {
            k: before[k] for k in ("effects", "duplicates", "keys")
        }
        assert after["keys"] == {
            "a": {"effects": 2, "duplicates": 0},
            "b": {"effects": 1, "duplicates": 1},
        }
        done, effect = client.probe(restarted.url, "a")
        assert done == client.PROBE_DONE and effect is not None and effect["id"] == "eff-000001"
        # ids go on; the idempotent key is still known
        assert client.post_effect(restarted.url, "c", "t")["id"] == "eff-000004"
        assert client.post_effect(restarted.url, "b", "t", idempotent=True)["duplicate"]


def test_a_torn_last_line_was_never_answered_and_is_cut(tmp_path: Path) -> None:
    state = tmp_path / "effects.jsonl"
    good = {
        "type": "effect",
        "id": "eff-000001",
        "key": "a",
        "target": "t",
        "summary": "s",
        "at_ms": 1,
    }
    state.write_text(json.dumps(good) + "\n" + '{"type": "effect", "id": "eff-0000')
    with fixture_process(state) as fixture:
        assert fixture.stats()["keys"] == {"a": {"effects": 1, "duplicates": 0}}
        assert client.post_effect(fixture.url, "b", "t")["id"] == "eff-000002"
    assert [r["id"] for r in lines(state)] == ["eff-000001", "eff-000002"]


def test_wait_for_fails_at_its_deadline() -> None:
    with pytest.raises(TimeoutError, match="never"):
        wait_for("never", lambda: None, deadline_s=0.05)
