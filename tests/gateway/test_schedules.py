"""Schedules over REST against a live stack (gRPC services + gateway on loopback), on SQLite
and PostgreSQL: create, read, list, change on an etag (a stale one is a conflict), pause and
resume, fire, backfill, the upcoming fire times, the events, the runs, delete; every route
wants a token. And webhook deliveries, which carry no token: a signed one creates one run,
the same delivery sent five times at once still one, a bad signature a 401 problem that
changes nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx

from automations.domain.webhooks import sign
from kernel.ids import now_ms
from tests.gateway.test_rest import assert_problem
from tests.support.gateway_stack import ALL, P_TOKEN, Q_TOKEN, GatewayStack, bearer
from tests.support.snapshot import snapshot

AUTH = bearer(ALL)
SCHEDULES = "/v1/projects/proj-p/schedules"
NIGHTLY = f"{SCHEDULES}/nightly"
EVERY_S = 900  # every 15 min, at epoch-aligned multiples


def schedule_body(schedule_id: str = "nightly", **fields: Any) -> dict[str, Any]:
    return {
        "schedule_id": schedule_id,
        "display_name": "Nightly report",
        "template": {"owner_id": "alice", "task_id": "report", "spec": {"command": "true"}},
        "spec": {"interval": f"{EVERY_S}s"},
        # Fires of the tests overlap (nothing runs the runs): every fire runs.
        "overlap_policy": "OVERLAP_POLICY_ALLOW_ALL",
        **fields,
    }


async def create(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await http.post(SCHEDULES, json=schedule_body(**fields), headers=AUTH)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


async def test_a_schedule_over_rest_from_create_to_delete(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    # Create: 201, Location, ETag; no webhook, no secret; the next fire is in the future.
    response = await http.post(SCHEDULES, json=schedule_body(), headers=AUTH)
    assert response.status_code == 201, response.text
    created = response.json()
    schedule = created["schedule"]
    assert created["webhook_secret"] == ""
    assert response.headers["location"] == NIGHTLY
    assert response.headers["etag"] == schedule["etag"]
    assert schedule["name"] == "projects/proj-p/schedules/nightly"
    assert schedule["spec"]["interval"] == f"{EVERY_S}s" and not schedule["paused"]
    assert schedule["overlap_policy"] == "OVERLAP_POLICY_ALLOW_ALL"
    assert schedule["next_fire_time"] > _iso(now_ms())
    assert_problem(
        await http.post(SCHEDULES, json=schedule_body(), headers=AUTH), 409, "SCHEDULE_EXISTS"
    )
    assert_problem(
        await http.post(
            "/v1/projects/proj-q/schedules", json=schedule_body(), headers=bearer(P_TOKEN)
        ),
        403,
        "PERMISSION_DENIED",
    )
    by_query = await http.post(
        f"{SCHEDULES}?schedule_id=hourly",
        json={k: v for k, v in schedule_body().items() if k != "schedule_id"},
        headers=AUTH,
    )
    assert by_query.status_code == 201 and by_query.json()["schedule"]["schedule_id"] == "hourly"

    # Read and list; another project's token sees a missing schedule and empty lists.
    got = await http.get(NIGHTLY, headers=AUTH)
    assert got.status_code == 200 and got.json() == schedule
    assert got.headers["etag"] == schedule["etag"]
    listed = (await http.get(SCHEDULES, headers=AUTH)).json()
    assert [s["schedule_id"] for s in listed["schedules"]] == ["hourly", "nightly"]
    everywhere = (await http.get("/v1/schedules", headers=bearer(P_TOKEN))).json()
    assert [s["schedule_id"] for s in everywhere["schedules"]] == ["hourly", "nightly"]
    first_page = (await http.get(f"{SCHEDULES}?page_size=1", headers=AUTH)).json()
    assert len(first_page["schedules"]) == 1 and first_page["next_page_token"]
    for listing in (SCHEDULES, "/v1/schedules"):
        hidden = (await http.get(listing, headers=bearer(Q_TOKEN))).json()
        assert hidden == {"schedules": [], "next_page_token": ""}
    other = assert_problem(
        await http.get(NIGHTLY, headers=bearer(Q_TOKEN)), 404, "SCHEDULE_NOT_FOUND"
    )
    missing = assert_problem(
        await http.get(f"{SCHEDULES}/nope", headers=AUTH), 404, "SCHEDULE_NOT_FOUND"
    )
    assert other["detail"] == missing["detail"].replace("nope", "nightly")

    # Change: a merge patch on the etag read; the old etag is then a conflict.
    patched = await http.patch(
        NIGHTLY,
        json={"display_name": "Nightly (patched)", "template": {"priority": 5}},
        headers={**AUTH, "If-Match": schedule["etag"]},
    )
    assert patched.status_code == 200, patched.text
    after = patched.json()
    assert after["display_name"] == "Nightly (patched)"
    assert after["template"]["priority"] == 5 and after["template"]["task_id"] == "report"
    assert after["etag"] != schedule["etag"] and patched.headers["etag"] == after["etag"]
    before = await snapshot(stack.database_url)
    stale = await http.patch(
        NIGHTLY, json={"display_name": "late"}, headers={**AUTH, "If-Match": schedule["etag"]}
    )
    assert_problem(stale, 409, "SCHEDULE_VERSION_CONFLICT")
    stale_body = await http.patch(
        NIGHTLY, json={"display_name": "late", "etag": schedule["etag"]}, headers=AUTH
    )
    assert_problem(stale_body, 409, "SCHEDULE_VERSION_CONFLICT")
    assert_problem(
        await http.patch(NIGHTLY, json={"display_name": "x"}, headers=AUTH), 400, "INVALID_ARGUMENT"
    )
    assert_problem(
        await http.patch(
            NIGHTLY, json={"schedule_id": "other", "etag": after["etag"]}, headers=AUTH
        ),
        400,
        "INVALID_ARGUMENT",
    )
    assert await snapshot(stack.database_url) == before
    # The etag in the body works as If-Match does.
    renamed = await http.patch(
        NIGHTLY, json={"display_name": "Nightly", "etag": after["etag"]}, headers=AUTH
    )
    assert renamed.status_code == 200 and renamed.json()["display_name"] == "Nightly"

    # Pause with a note, resume.
    paused = await http.post(f"{NIGHTLY}:pause", json={"note": "vendor outage"}, headers=AUTH)
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] and paused.json()["pause_note"].endswith(": vendor outage")
    assert_problem(
        await http.post(f"{NIGHTLY}:pause", json={"why": "x"}, headers=AUTH),
        400,
        "INVALID_ARGUMENT",
    )
    resumed = await http.post(f"{NIGHTLY}:resume", headers=AUTH)
    assert resumed.status_code == 200 and not resumed.json()["paused"]
    assert resumed.json()["pause_note"] == ""

    # Fire now: a run exists; the same request id is the same run.
    fired = await http.post(f"{NIGHTLY}:fire", json={"request_id": "fire-1"}, headers=AUTH)
    assert fired.status_code == 200, fired.text
    (fired_run,) = fired.json()["runs"]
    assert not fired_run["existing"]
    again = await http.post(f"{NIGHTLY}:fire", headers={**AUTH, "Idempotency-Key": "fire-1"})
    repeated = again.json()["runs"][0]
    assert repeated["run_id"] == fired_run["run_id"] and repeated["existing"]
    run = (await http.get(f"/v1/projects/proj-p/runs/{fired_run['run_id']}", headers=AUTH)).json()
    assert run["trigger_type"] == "manual" and run["trigger_id"] == "schedule:nightly"
    assert run["task_id"] == "report" and run["display_state"] == "DISPLAY_STATE_QUEUED"

    # Backfill two past fire times; again, they keep their runs.
    start = (now_ms() // 1000 // EVERY_S - 4) * EVERY_S * 1000
    window = {"start_time": _iso(start), "end_time": _iso(start + EVERY_S * 1000)}
    backfilled = await http.post(f"{NIGHTLY}:backfill", json=window, headers=AUTH)
    assert backfilled.status_code == 200, backfilled.text
    filled = backfilled.json()["runs"]
    assert [r["fire_time"] for r in filled] == [window["start_time"], window["end_time"]]
    assert not any(r["existing"] for r in filled)
    refilled = (await http.post(f"{NIGHTLY}:backfill", json=window, headers=AUTH)).json()
    assert [r["run_id"] for r in refilled["runs"]] == [r["run_id"] for r in filled]
    assert all(r["existing"] for r in refilled["runs"])
    assert_problem(
        await http.post(
            f"{NIGHTLY}:backfill", json={"start_time": window["start_time"]}, headers=AUTH
        ),
        400,
        "INVALID_ARGUMENT",
    )

    # Upcoming fire times: epoch-aligned, 15 min apart, in the schedule's zone.
    upcoming = (await http.get(f"{NIGHTLY}/upcoming?count=3", headers=AUTH)).json()
    assert upcoming["time_zone"] == "UTC" and len(upcoming["fires"]) == 3
    times = [f["fire_time"] for f in upcoming["fires"]]
    assert times == sorted(times) and times[0] > _iso(now_ms())
    assert all(f["local_time"].endswith("+00:00") for f in upcoming["fires"])

    # Events, newest first, paged.
    events = (await http.get(f"{NIGHTLY}/events", headers=AUTH)).json()["events"]
    types = [e["type"] for e in events]
    assert types[-1] == "created"
    assert {"updated", "paused", "resumed", "fired", "backfill"} <= set(types)
    sequences = [int(e["sequence"]) for e in events]
    assert sequences == sorted(sequences, reverse=True)
    page = (await http.get(f"{NIGHTLY}/events?page_size=2", headers=AUTH)).json()
    assert [e["sequence"] for e in page["events"]] == [e["sequence"] for e in events[:2]]
    rest = await http.get(
        f"{NIGHTLY}/events", params={"page_token": page["next_page_token"]}, headers=AUTH
    )
    assert rest.json()["events"] == events[2:]

    # The runs of the schedule: each run once, newest fire first, as GetRun shows it.
    run_ids = {fired_run["run_id"], *(r["run_id"] for r in filled)}
    runs = (await http.get(f"{NIGHTLY}/runs", headers=AUTH)).json()
    assert {r["id"] for r in runs["runs"]} == run_ids and len(runs["runs"]) == 3
    assert runs["next_page_token"] == ""
    assert all(r["display_state"] == "DISPLAY_STATE_QUEUED" for r in runs["runs"])
    seen: list[str] = []
    token = ""
    for _ in range(10):
        paged = (
            await http.get(
                f"{NIGHTLY}/runs", params={"page_size": 1, "page_token": token}, headers=AUTH
            )
        ).json()
        assert len(paged["runs"]) <= 1
        seen += [r["id"] for r in paged["runs"]]
        token = paged["next_page_token"]
        if not token:
            break
    # A run fired again may show up again on a later page, never twice on one.
    assert set(seen) == run_ids

    # Delete: conditional on If-Match; its runs stay.
    current = (await http.get(NIGHTLY, headers=AUTH)).json()
    assert_problem(
        await http.delete(NIGHTLY, headers={**AUTH, "If-Match": schedule["etag"]}),
        409,
        "SCHEDULE_VERSION_CONFLICT",
    )
    deleted = await http.delete(NIGHTLY, headers={**AUTH, "If-Match": current["etag"]})
    assert deleted.status_code == 204 and deleted.content == b""
    assert_problem(await http.get(NIGHTLY, headers=AUTH), 404, "SCHEDULE_NOT_FOUND")
    assert_problem(await http.delete(NIGHTLY, headers=AUTH), 404, "SCHEDULE_NOT_FOUND")
    kept = await http.get(f"/v1/projects/proj-p/runs/{fired_run['run_id']}", headers=AUTH)
    assert kept.status_code == 200


async def test_every_schedule_route_wants_a_token(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    await create(http)
    before = await snapshot(stack.database_url)
    calls = [
        ("GET", "/v1/schedules", None),
        ("GET", SCHEDULES, None),
        ("POST", SCHEDULES, schedule_body("other")),
        ("GET", NIGHTLY, None),
        ("PATCH", NIGHTLY, {"display_name": "x"}),
        ("DELETE", NIGHTLY, None),
        ("POST", f"{NIGHTLY}:pause", {"note": "x"}),
        ("POST", f"{NIGHTLY}:resume", None),
        ("POST", f"{NIGHTLY}:fire", None),
        ("POST", f"{NIGHTLY}:backfill", {"start_time": _iso(0), "end_time": _iso(0)}),
        ("GET", f"{NIGHTLY}/upcoming", None),
        ("GET", f"{NIGHTLY}/events", None),
        ("GET", f"{NIGHTLY}/runs", None),
        ("POST", f"{NIGHTLY}:rotateWebhookSecret", None),
    ]
    # No token, or an unknown one (alternately: past 20 failures of one token a minute its
    # next ones are refused with 429 instead).
    for index, (method, path, body) in enumerate(calls):
        headers = bearer("not-a-token") if index % 2 else {}
        answer = await http.request(method, path, json=body, headers=headers)
        assert_problem(answer, 401, "UNAUTHENTICATED")
        assert answer.headers["www-authenticate"] == "Bearer"
    assert await snapshot(stack.database_url) == before


async def _deliver(
    http: httpx.AsyncClient,
    secret: str,
    delivery: str,
    body: bytes,
    *,
    at_ms: int | None = None,
    path: str = NIGHTLY,
) -> httpx.Response:
    signature = sign(secret, now_ms() if at_ms is None else at_ms, delivery, body)
    return await http.post(
        f"{path}:deliver",
        content=body,
        headers={
            "X-Truerun-Delivery": delivery,
            "X-Truerun-Signature": signature,
            "Content-Type": "application/json",
        },
    )


async def _runs(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = (await http.get("/v1/projects/proj-p/runs", headers=AUTH)).json()[
        "runs"
    ]
    return runs


async def test_webhook_deliveries_are_signed_and_create_one_run_each(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    created = await create(http, webhook_enabled=True)
    secret = created["webhook_secret"]
    assert secret.startswith("whsec_")
    assert created["schedule"]["webhook_path"] == f"{NIGHTLY}:deliver"
    body = b'{"ref": "refs/heads/main", "token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}'

    # Signed, no bearer token: one run, with the payload (secrets redacted) in its spec.
    first = await _deliver(http, secret, "delivery-1", body)
    assert first.status_code == 200, first.text
    (fired,) = first.json()["runs"]
    assert "schedule" not in first.json()  # the sender learns its run, not the schedule
    run = (await http.get(f"/v1/projects/proj-p/runs/{fired['run_id']}", headers=AUTH)).json()
    assert run["trigger_type"] == "webhook" and run["trigger_id"] == "schedule:nightly"
    webhook = run["spec"]["webhook"]
    assert webhook["delivery_id"] == "delivery-1"
    assert webhook["payload"]["ref"] == "refs/heads/main"
    assert "ghp_" not in str(webhook["payload"])

    # The same delivery five times at once: the same one run.
    again = await asyncio.gather(*(_deliver(http, secret, "delivery-1", body) for _ in range(5)))
    assert all(r.status_code == 200 for r in again), [r.text for r in again]
    assert {r.json()["runs"][0]["run_id"] for r in again} == {fired["run_id"]}
    # A new delivery five times at once: one new run, whichever arrives first makes it.
    burst = await asyncio.gather(*(_deliver(http, secret, "delivery-2", body) for _ in range(5)))
    assert all(r.status_code == 200 for r in burst), [r.text for r in burst]
    (second,) = {r.json()["runs"][0]["run_id"] for r in burst}
    assert second != fired["run_id"]
    assert sorted(r["id"] for r in await _runs(http)) == sorted([fired["run_id"], second])

    # Refused, all alike and changing nothing: a bad signature, another secret, an old
    # timestamp, a body other than the one signed, an unknown schedule, a token instead.
    before = await snapshot(stack.database_url)
    bad = await http.post(
        f"{NIGHTLY}:deliver",
        content=body,
        headers={"X-Truerun-Delivery": "delivery-3", "X-Truerun-Signature": "t=1,v1=00"},
    )
    problem = assert_problem(bad, 401, "WEBHOOK_SIGNATURE_INVALID")
    assert bad.headers["www-authenticate"].startswith("Truerun-Signature")
    refusals = [
        await _deliver(http, "whsec_another", "delivery-3", body),
        await _deliver(http, secret, "delivery-3", body, at_ms=now_ms() - 10 * 60_000),
        await _deliver(http, secret, "delivery-3", body, path=f"{SCHEDULES}/nope"),
        await http.post(
            f"{NIGHTLY}:deliver",
            content=body,
            headers={
                "X-Truerun-Delivery": "delivery-3",
                "X-Truerun-Signature": sign(secret, now_ms(), "delivery-3", b"{}"),
            },
        ),
        await http.post(f"{NIGHTLY}:deliver", content=body, headers=AUTH),
    ]
    for refused in refusals:
        assert assert_problem(refused, 401, "WEBHOOK_SIGNATURE_INVALID") == problem
    assert await snapshot(stack.database_url) == before

    # A schedule without webhook_enabled refuses exactly the same way.
    await create(http, schedule_id="quiet")
    quiet = await _deliver(http, secret, "delivery-4", body, path=f"{SCHEDULES}/quiet")
    assert assert_problem(quiet, 401, "WEBHOOK_SIGNATURE_INVALID") == problem
    runs = (await http.get(f"{NIGHTLY}/runs", headers=AUTH)).json()["runs"]
    assert sorted(r["id"] for r in runs) == sorted([fired["run_id"], second])


async def test_a_rotated_secret_signs_and_the_old_one_no_longer_does(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    created = await create(http, webhook_enabled=True)
    old = created["webhook_secret"]
    rotated = await http.post(f"{NIGHTLY}:rotateWebhookSecret", headers=AUTH)
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["webhook_secret"]
    assert new.startswith("whsec_") and new != old
    assert rotated.json()["schedule"]["webhook_enabled"] is True
    body = b"{}"
    assert_problem(await _deliver(http, old, "r-1", body), 401, "WEBHOOK_SIGNATURE_INVALID")
    assert (await _deliver(http, new, "r-2", body)).status_code == 200
