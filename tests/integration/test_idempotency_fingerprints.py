"""A keyed run's fingerprint over real stores (SQLite and PostgreSQL): racing creates of one
key with different requests make one run and refuse the other; the fail policy still
answers IDEMPOTENCY_KEY_CONFLICT; a run kept before fingerprints were (migration 0023)
answers its key to any request, as before (docs/state-model.md "6a. Idempotency keys and
request ids")."""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
import grpc
from truerun.v1 import common_pb2

from kernel.db.migrate import downgrade, upgrade
from tests.integration.test_run_service_grpc import create_request, error_info, expect_error
from tests.support.grpc_server import GrpcApi, grpc_run_service
from tests.support.snapshot import snapshot


async def _execute(database_url: str, statement: str) -> None:
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            conn.execute(statement)
            conn.commit()
        finally:
            conn.close()
        return
    pg = await asyncpg.connect(database_url)
    try:
        await pg.execute(statement)
    finally:
        await pg.close()


async def test_racing_creates_of_one_key_with_two_requests_make_one_run(
    grpc_api: GrpcApi, migrated_database_url: str
) -> None:
    for round_no in range(5):
        key = f"race-{round_no}"
        tasks = [f"t{i % 2}" for i in range(6)]  # two requests, three times each, at once
        answers = await asyncio.gather(
            *(
                grpc_api.stub.CreateRun(create_request(task_id=task, idempotency_key=key))
                for task in tasks
            ),
            return_exceptions=True,
        )
        made = {a.run.id for a in answers if not isinstance(a, BaseException)}
        assert len(made) == 1, answers  # one run, whichever request came first
        (run_id,) = made
        winner = next(a for a in answers if not isinstance(a, BaseException)).run.task_id
        for task, answer in zip(tasks, answers, strict=True):
            if task == winner:  # the request that made the run (or its twin) gets it
                assert not isinstance(answer, BaseException), answer
                assert answer.run.id == run_id
                continue
            assert isinstance(answer, grpc.aio.AioRpcError), answer  # the other is refused
            assert answer.code() == grpc.StatusCode.ALREADY_EXISTS
            info = error_info(answer)
            assert info.reason == "IDEMPOTENCY_KEY_REUSED"
            assert info.metadata["run_id"] == run_id
    counts = await snapshot(migrated_database_url)
    assert len(counts["runs"]) == 5


async def test_the_fail_policy_still_answers_the_key_conflict_for_any_request(
    grpc_api: GrpcApi,
) -> None:
    first = (await grpc_api.stub.CreateRun(create_request(idempotency_key="k"))).run
    for fields in ({}, {"task_id": "other"}):
        info = await expect_error(
            grpc_api.stub.CreateRun(
                create_request(
                    idempotency_key="k", conflict_policy=common_pb2.CONFLICT_POLICY_FAIL, **fields
                )
            ),
            grpc.StatusCode.ALREADY_EXISTS,
            "IDEMPOTENCY_KEY_CONFLICT",
        )
        assert info.metadata["existing_run_id"] == first.id


async def test_a_key_kept_before_fingerprints_answers_any_request_as_before(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url
    async with grpc_run_service(url, migrate=False) as api:
        old = (await api.stub.CreateRun(create_request(idempotency_key="old-key"))).run
    # The run as a database from before 0023 kept it: the column gone and back, NULL.
    await downgrade(url, "0022_lean_event_and_null_indexes")
    await upgrade(url)
    async with grpc_run_service(url, migrate=False) as api:
        again = await api.stub.CreateRun(
            create_request(idempotency_key="old-key", task_id="another")
        )
        assert again.existing and again.run.id == old.id
        # A key kept since 0023 is checked; clearing its fingerprint (NULL) trusts it again.
        new = (await api.stub.CreateRun(create_request(idempotency_key="new-key"))).run
        await expect_error(
            api.stub.CreateRun(create_request(idempotency_key="new-key", task_id="another")),
            grpc.StatusCode.ALREADY_EXISTS,
            "IDEMPOTENCY_KEY_REUSED",
        )
        await _execute(url, f"UPDATE runs SET request_fingerprint = NULL WHERE id = '{new.id}'")
        trusted = await api.stub.CreateRun(
            create_request(idempotency_key="new-key", task_id="another")
        )
        assert trusted.existing and trusted.run.id == new.id
