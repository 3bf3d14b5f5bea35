"""Issue #37, the doors of a secret, over REST and gRPC against a live stack on SQLite and
PostgreSQL: a signed webhook delivery's payload is data from outside, so every string under a
secret-named key (``password``, nested ``Client-Secret``, ``apiKey``, ...) is redacted in the
stored spec, GetRun and REST; CreateRun still refuses literal secrets (by shape and by key
name) and accepts environment references in any position."""

from __future__ import annotations

import json

import httpx
from truerun.v1 import run_service_pb2 as rs

from tests.gateway.test_schedules import _deliver, create
from tests.support.gateway_stack import ALL, GatewayStack, bearer

AUTH = bearer(ALL)
RUNS = "/v1/projects/proj-p/runs"
SECRETS = ("hunter2-zz9", "nested-s3cr3t", "deep-pa55", "list-t0ken", "Zm9vOmJhcg-cookie")


async def test_a_webhook_payload_is_redacted_by_key_name_at_any_depth(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    created = await create(http, webhook_enabled=True)
    payload = {
        "password": "hunter2-zz9",
        "api_key": "plain-value",
        "user": {"name": "ana", "Client-Secret": "nested-s3cr3t", "max_tokens": 100},
        "hooks": [{"config": {"db": {"PASSWD": "deep-pa55"}}}, {"auth": ["list-t0ken"]}],
        "headers": {"cookie": "Zm9vOmJhcg-cookie"},
        "ref": "refs/heads/main",
    }
    body = json.dumps(payload).encode()
    answer = await _deliver(http, created["webhook_secret"], "delivery-r37", body)
    assert answer.status_code == 200, answer.text
    (fired,) = answer.json()["runs"]
    run_id = fired["run_id"]

    stored = await stack.app.store.load(run_id)
    assert stored is not None
    grpc_run = await stack.runs.GetRun(rs.GetRunRequest(id=run_id))
    rest = await http.get(f"{RUNS}/{run_id}", headers=AUTH)
    assert rest.status_code == 200
    for seen in (json.dumps(stored.run.spec), str(grpc_run.spec), rest.text):
        assert [s for s in SECRETS if s in seen] == []
        assert "plain-value" not in seen
    got = rest.json()["spec"]["webhook"]["payload"]
    assert got["password"] == got["api_key"] == "[redacted]"
    assert got["user"] == {"name": "ana", "Client-Secret": "[redacted]", "max_tokens": 100}
    assert got["hooks"] == [{"config": {"db": {"PASSWD": "[redacted]"}}}, {"auth": ["[redacted]"]}]
    assert got["ref"] == "refs/heads/main"  # the rest of the payload as sent


#: Environment references in command shapes: never taken for a secret (the four of the issue
#: first).
ENV_COMMANDS = [
    "echo token=$TRUERUN_CALLBACK_TOKEN; sleep 1",
    "export API_KEY=${API_KEY:-none}",
    "echo password=${PW}&& run",
    "deploy --secret=$SECRET,$OTHER",
    "curl -H 'Authorization: Bearer $API_TOKEN' https://example.com",
    'curl -H "Authorization: Bearer ${API_TOKEN}" https://example.com',
    "mysql --password=$DB_PASSWORD -h db",
    "mysql --password $DB_PASSWORD -h db",
    "psql postgres://app:$PGPASSWORD@db/app",
    "TOKEN=$TOKEN ./run.sh",
    "export SECRET_KEY=${SECRET_KEY:?set it}",
    "export GH_TOKEN=${GH_TOKEN-}",
    "login --api-key ${KEY:=default}",
    'echo "password: $PASS"',
    "run --token=$T|tee out.log",
    "x --client-secret=${CS}) && y",
    "aws configure set aws_secret_access_key $AWS_SECRET_ACCESS_KEY",
    "echo api_key=$A;echo token=$B",
    "docker login -p $REG_PASSWORD registry",
    "helm install --set auth.password=${PW} x",
]
LITERAL_COMMANDS = [
    "echo token=trtcb_abcdefghijklmnopqrstuvwxyz",
    "export API_KEY=s3cr3t-value",
    "echo password=hunter2&& run",
    "deploy --secret=literal,$OTHER",
    "mysql --password=$DB:hunter2",
]


def test_twenty_command_shapes_hold_references() -> None:
    assert len(ENV_COMMANDS) == 20 and len(set(ENV_COMMANDS)) == 20


async def test_environment_references_are_accepted_and_literal_secrets_refused(
    http: httpx.AsyncClient,
) -> None:
    accepted = []
    for command in ENV_COMMANDS:
        body = {"owner_id": "alice", "task_id": "t", "spec": {"command": command}}
        created = await http.post(RUNS, json=body, headers=AUTH)
        assert created.status_code in (200, 201), (command, created.text)
        assert created.json()["spec"]["command"] == command  # stored and shown as given
        accepted.append(created.json()["id"])
    refused_specs: list[dict[str, object]] = [{"command": c} for c in LITERAL_COMMANDS]
    refused_specs += [
        {"command": "deploy", "password": "hunter2-zz9"},
        {"command": "deploy", "config": {"db": {"Client-Secret": "x1y2z3"}}},
        {"command": "deploy", "auth": ["plain"]},
    ]
    for spec in refused_specs:
        body = {"owner_id": "alice", "task_id": "t", "spec": spec}
        refused = await http.post(RUNS, json=body, headers=AUTH)
        assert refused.status_code == 400, (spec, refused.text)
        assert refused.json()["reason"] == "INVALID_ARGUMENT"
        assert "looks like a secret" in refused.json()["detail"]
    listed = (await http.get(RUNS, headers=AUTH, params={"page_size": 100})).json()
    assert sorted(run["id"] for run in listed["runs"]) == sorted(accepted)  # none refused stored
