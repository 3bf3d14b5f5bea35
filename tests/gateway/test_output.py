"""A run's output over REST: ``GET .../output`` pages it by byte offset (pages concatenate to
the whole), ``GET .../output:stream`` follows it as Server-Sent Events (chunks, a new
attempt announced, ``end`` when the run ended and everything was sent) and resumes from
Last-Event-ID or ?offset=. Scoped and authenticated like every run route.

The output is written the way a runtime's OUTPUT events write it: through the real
transition service of the stack's own services.
"""

from __future__ import annotations

from typing import Any

import httpx

from coordinator.domain import commands as c
from coordinator.domain.model import Attempt
from tests.support.factories import RUNTIME, SCHEDULER, started
from tests.support.gateway_stack import ALL, P_TOKEN, Q_TOKEN, GatewayStack, bearer
from tests.support.sse_client import Message, Stream, open_stream

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"
LINES = [f"line {i:02d}: ünïcode ✓\n" for i in range(1, 31)]


class Runtime:
    """Plays one attempt's runtime: output chunks and the result, each with the next seq."""

    def __init__(self, stack: GatewayStack, attempt: Attempt) -> None:
        self.stack, self.attempt, self.seq = stack, attempt, 0

    async def _send(self, command: type[c.RuntimeCommand], **extra: Any) -> None:
        self.seq += 1
        a = self.attempt
        sent = command(a.run_id, a.id, a.runtime_task_id, self.seq, RUNTIME, **extra)
        await self.stack.app.transitions.execute(sent)

    async def output(self, text: str) -> None:
        await self._send(c.RuntimeNote, kind=c.NoteKind.OUTPUT, details={"data": text})

    async def finish(self, outcome: c.RuntimeOutcome = c.RuntimeOutcome.SUCCEEDED) -> None:
        await self._send(c.RuntimeResult, outcome=outcome, exit_code=0)


async def _running(stack: GatewayStack, **fields: Any) -> Runtime:
    _, attempt = await started(
        stack.app.transitions, project_id="proj-p", owner_id="alice", **fields
    )
    return Runtime(stack, attempt)


async def _read_all(http: httpx.AsyncClient, path: str, max_bytes: int) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    offset = "0"
    while True:
        params = {"offset": offset, "max_bytes": str(max_bytes)}
        response = await http.get(f"{path}/output", params=params, headers=AUTH)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        offset = pages[-1]["next_offset"]
        if int(offset) >= int(pages[-1]["stored_bytes"]):
            return pages


def _text(pages: list[dict[str, Any]]) -> str:
    return "".join(chunk["text"] for page in pages for chunk in page["chunks"])


async def test_output_pages_concatenate_and_are_scoped(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    runtime = await _running(stack)
    for line in LINES:
        await runtime.output(line)
    await runtime.finish()
    path = f"{RUNS}/{runtime.attempt.run_id}"

    whole = (await http.get(f"{path}/output", headers=bearer(P_TOKEN))).json()
    assert _text([whole]) == "".join(LINES)
    assert whole["attempt_id"] == runtime.attempt.id and whole["attempt_no"] == 1
    assert whole["attempt_finished"] and whole["run_finished"] and not whole["truncated"]
    assert whole["next_offset"] == whole["stored_bytes"] == str(len("".join(LINES).encode()))
    assert {chunk["kind"] for chunk in whole["chunks"]} == {"OUTPUT_CHUNK_KIND_TEXT"}

    pages = await _read_all(http, path, max_bytes=100)
    assert len(pages) > 2 and _text(pages) == "".join(LINES)
    by_attempt = await http.get(
        f"{path}/output", params={"attempt_id": runtime.attempt.id}, headers=AUTH
    )
    assert _text([by_attempt.json()]) == "".join(LINES)

    for headers, params, status, reason in (
        (None, None, 401, "UNAUTHENTICATED"),
        (bearer("wrong"), None, 401, "UNAUTHENTICATED"),
        (bearer(Q_TOKEN), None, 404, "RUN_NOT_FOUND"),
        (AUTH, {"offset": "-1"}, 400, "INVALID_ARGUMENT"),
        (AUTH, {"offset": "x"}, 400, "INVALID_ARGUMENT"),
    ):
        refused = await http.get(f"{path}/output", headers=headers, params=params)
        assert refused.status_code == status, (headers, params, refused.text)
        assert refused.json()["reason"] == reason
    # Another project's run is the same 404 as a missing run.
    missing = await http.get(f"{RUNS}/{runtime.attempt.id}/output", headers=AUTH)
    hidden = await http.get(f"{path}/output", headers=bearer(Q_TOKEN))
    assert missing.status_code == hidden.status_code == 404

    # A run that has not started has no output yet: empty, not an error.
    for approval in (False, True):
        body = {"owner_id": "a", "task_id": "t", "requires_approval": approval}
        queued = (await http.post(RUNS, json=body, headers=AUTH)).json()
        empty = (await http.get(f"{RUNS}/{queued['id']}/output", headers=AUTH)).json()
        assert empty["chunks"] == [] and empty["next_offset"] == "0", empty
        assert not empty["attempt_finished"] and not empty["run_finished"]


async def _until(stream: Stream, event: str) -> list[Message]:
    """Messages up to and including the next ``event`` one."""
    seen = [await stream.next_message()]
    while seen[-1].event != event:
        seen.append(await stream.next_message())
    return seen


def _texts(seen: list[Message]) -> str:
    return "".join(m.json()["text"] for m in seen if m.event == "output")


async def test_output_stream_follows_to_the_end_and_resumes(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    runtime = await _running(stack)
    await runtime.output("first\n")
    path = f"{RUNS}/{runtime.attempt.run_id}/output:stream"
    attempt_id = runtime.attempt.id

    async with open_stream(http, path, AUTH) as stream:
        announced = await stream.next_message()
        assert announced.event == "attempt" and announced.id == f"{attempt_id}:0"
        assert announced.json() == {"attempt_id": attempt_id, "attempt_no": 1}
        first = await stream.next_message()
        assert first.event == "output" and first.id == f"{attempt_id}:6"
        assert first.json() == {
            "attempt_id": attempt_id,
            "attempt_no": 1,
            "offset": "0",
            "text": "first\n",
            "kind": "OUTPUT_CHUNK_KIND_TEXT",
        }
        await runtime.output("second\n")  # written while the stream is open
        second = await stream.next_message()
        assert (second.json()["text"], second.id) == ("second\n", f"{attempt_id}:13")
        await runtime.output("third\n")
        await runtime.finish()
        rest = await _until(stream, "end")
        assert _texts(rest) == "third\n" and rest[-1].json() == {}
        assert await _ended(stream)

    # Resumed after "first": the rest only, whether by Last-Event-ID or by ?offset=.
    for headers, params in (
        ({**AUTH, "Last-Event-ID": first.id}, None),
        (None, {"last_event_id": first.id, "access_token": ALL}),
        (AUTH, {"attempt_id": attempt_id, "offset": "6"}),
    ):
        async with open_stream(http, path, headers, params) as stream:
            seen = await _until(stream, "end")
            assert _texts(seen) == "second\nthird\n", (headers, params)
            assert "attempt" not in {m.event for m in seen}

    for headers, params, status in (
        (None, None, 401),
        (None, {"access_token": Q_TOKEN}, 404),
        ({**AUTH, "Last-Event-ID": "no-offset"}, None, 400),
        ({**AUTH, "Last-Event-ID": f"{attempt_id}:x"}, None, 400),
        ({**AUTH, "Last-Event-ID": "01a23175-896c-74cb-9ee5-89398b42cec1:0"}, None, 404),
    ):
        refused = await http.get(path, headers=headers, params=params)
        assert refused.status_code == status, (headers, params, refused.text)
        assert refused.headers["content-type"].startswith("application/problem+json")


async def test_output_stream_moves_to_the_retry_attempt(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    first = await _running(stack, max_attempts=2)
    await first.output("attempt one\n")
    run_id = first.attempt.run_id
    async with open_stream(http, f"{RUNS}/{run_id}/output:stream", AUTH) as stream:
        seen = await _until(stream, "output")
        await first.output("one's last line\n")
        await first.finish(c.RuntimeOutcome.FAILED)
        transitions = stack.app.transitions
        await transitions.execute(c.RetryAttempt(run_id, SCHEDULER))
        await transitions.execute(c.Claim(run_id, SCHEDULER, runtime_instance_id="inst-1"))
        fenced = await transitions.execute(c.StartFence(run_id, SCHEDULER, callback_token_hash="h"))
        assert fenced.attempt is not None and fenced.attempt.attempt_no == 2
        second = Runtime(stack, fenced.attempt)
        await second.output("attempt two\n")
        await second.finish()
        seen += await _until(stream, "end")
    assert [(m.event, m.json().get("attempt_no")) for m in seen] == [
        ("attempt", 1),
        ("output", 1),
        ("output", 1),
        ("attempt", 2),
        ("output", 2),
        ("end", None),
    ]
    assert _texts(seen) == "attempt one\none's last line\nattempt two\n"


async def _ended(stream: Stream) -> bool:
    try:
        await stream.next_message(timeout=10)
    except EOFError:
        return True
    return False
