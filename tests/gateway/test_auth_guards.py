"""Issue #37 "Guards that never lock out the honest", over REST on the real gateway and
services (loopback, SQLite and PostgreSQL): a flood of bad tokens from one address with
rotating X-Forwarded-For never refuses a valid client of the same address, and past the
bound the bad ones are 429 with Retry-After; forwarded addresses are believed only from
TRUERUN_TRUSTED_PROXIES; bad webhook signatures have their own bound per schedule
(docs/gateway.md "Client addresses", "Webhook deliveries")."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

from automations.domain.webhooks import sign
from kernel.ids import now_ms
from tests.gateway.test_schedules import AUTH, SCHEDULES, create
from tests.support.gateway_stack import P_TOKEN, GatewayStack, bearer, gateway_stack

RUNS = "/v1/projects/proj-p/runs"
BAD_REQUESTS = 1_000
BATCH = 50
#: FailureLimit's defaults (docs/gateway.md "Tokens and projects"; tests/unit/test_auth_bound.py).
PER_TOKEN, PER_SOURCE, WINDOW_S = 20, 100, 60


def _refused_past_the_bound(answer: httpx.Response, reason: str) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["reason"] == reason
    assert 1 <= int(answer.headers["retry-after"]) <= 60


async def test_a_thousand_bad_tokens_with_rotating_xff_never_lock_out_a_valid_client(
    http: httpx.AsyncClient,
) -> None:
    """1,000 requests with distinct bad tokens and a new X-Forwarded-For each, from the
    address of a valid client sending between them: every valid request answers 200; the
    bad ones are 401 up to the per-source bound, then 429 with Retry-After (the rotating
    header, from a peer no one trusts, changes nothing)."""
    bad: list[httpx.Response] = []
    good: list[httpx.Response] = []
    for start in range(0, BAD_REQUESTS, BATCH):
        guesses = [
            http.get(
                RUNS,
                headers={
                    **bearer(f"guess-{i}"),
                    "X-Forwarded-For": f"198.51.{i // 250}.{i % 250}",
                },
            )
            for i in range(start, start + BATCH)
        ]
        valid = [http.get(RUNS, headers=bearer(P_TOKEN)) for _ in range(5)]
        answers = await asyncio.gather(*guesses, *valid)
        bad.extend(answers[:BATCH])
        good.extend(answers[BATCH:])
    codes = Counter(answer.status_code for answer in bad)
    print(
        f"REST: {len(good)} valid requests, "
        f"{sum(a.status_code == 200 for a in good)} x 200; {BAD_REQUESTS} bad: "
        f"{codes[401]} x 401, {codes[429]} x 429 "
        f"({sum('retry-after' in a.headers for a in bad)} with Retry-After)"
    )
    assert [a.status_code for a in good] == [200] * len(good) and len(good) == 100
    assert codes == {401: PER_SOURCE, 429: BAD_REQUESTS - PER_SOURCE}
    for answer in bad:
        if answer.status_code == 429:
            _refused_past_the_bound(answer, "TOO_MANY_FAILED_AUTHENTICATIONS")
        else:
            assert "retry-after" not in answer.headers


async def test_forwarded_addresses_are_believed_only_from_trusted_proxies(
    database_url: str,
) -> None:
    """No trusted proxies (the default): 30 tries of one bad token with a new
    X-Forwarded-For each are one source, refused past the bound. TRUERUN_TRUSTED_PROXIES
    naming the peer: each forwarded client is its own source (X-Forwarded-For and
    Forwarded alike), a refused one does not refuse another, and its valid token passes."""
    limit = PER_TOKEN
    guess = bearer("the-same-guess")

    async def tries(http: httpx.AsyncClient, forwarded: list[dict[str, str]]) -> list[int]:
        answers = [await http.get(RUNS, headers={**guess, **f}) for f in forwarded]
        return [a.status_code for a in answers]

    rotating = [{"X-Forwarded-For": f"203.0.113.{i}"} for i in range(30)]
    async with (
        gateway_stack(database_url) as untrusting,
        httpx.AsyncClient(base_url=untrusting.base_url) as http,
    ):
        assert await tries(http, rotating) == [401] * limit + [429] * (30 - limit)
    async with (
        gateway_stack(database_url, trusted_proxies="10.9.9.9, 127.0.0.0/8") as trusting,
        httpx.AsyncClient(base_url=trusting.base_url) as http,
    ):
        assert await tries(http, rotating) == [401] * 30
        one = {"X-Forwarded-For": "192.0.2.7"}
        # A proxy appends the peer it saw: the client is the rightmost untrusted hop,
        # whatever the client itself wrote further left.
        chained = {"X-Forwarded-For": "6.6.6.6, 192.0.2.7, 10.9.9.9"}
        rfc7239 = {"Forwarded": 'for="192.0.2.7:4711";proto=http'}
        answers = await tries(http, [one, chained, rfc7239] * 8)
        assert answers == [401] * limit + [429] * (24 - limit)
        last = await http.get(RUNS, headers={**guess, **one})
        _refused_past_the_bound(last, "TOO_MANY_FAILED_AUTHENTICATIONS")
        assert await tries(http, [{"X-Forwarded-For": "192.0.2.8"}]) == [401]
        valid = await http.get(RUNS, headers={**bearer(P_TOKEN), **one})
        assert valid.status_code == 200


async def test_bad_webhook_signatures_are_bounded_per_schedule_apart_from_tokens(
    http: httpx.AsyncClient, stack: GatewayStack
) -> None:
    """25 deliveries with a bad signature for one schedule: 401 up to the bound, then 429
    TOO_MANY_BAD_SIGNATURES with Retry-After. A correctly signed delivery still fires, a bad
    one for another schedule is still 401, and the same address's token is untouched."""
    secret = (await create(http, webhook_enabled=True))["webhook_secret"]
    await create(http, schedule_id="other", webhook_enabled=True)
    body = b'{"ref": "main"}'

    async def deliver(schedule: str, delivery: str, key: str) -> httpx.Response:
        return await http.post(
            f"{SCHEDULES}/{schedule}:deliver",
            content=body,
            headers={
                "X-Truerun-Delivery": delivery,
                "X-Truerun-Signature": sign(key, now_ms(), delivery, body),
                "Content-Type": "application/json",
            },
        )

    bad = [await deliver("nightly", f"d-{i}", "whsec_wrong") for i in range(25)]
    codes = [answer.status_code for answer in bad]
    print(f"webhooks: 25 bad signatures: {codes.count(401)} x 401, {codes.count(429)} x 429")
    assert codes == [401] * 20 + [429] * 5
    assert {a.json()["reason"] for a in bad[:20]} == {"WEBHOOK_SIGNATURE_INVALID"}
    _refused_past_the_bound(bad[-1], "TOO_MANY_BAD_SIGNATURES")
    signed = await deliver("nightly", "d-signed", secret)
    assert signed.status_code == 200, signed.text
    assert (await deliver("other", "d-x", "whsec_wrong")).status_code == 401
    assert (await http.get(RUNS, headers=AUTH)).status_code == 200
    assert (await http.get(RUNS, headers=bearer("a-guess"))).status_code == 401


async def test_the_services_count_a_gateways_clients_apart_when_it_vouches(
    database_url: str,
) -> None:
    """A token the gateway holds and the services refuse (their token sets differ) fails
    in the services. With the gateway's :service token its calls vouch for each client's
    address: one client past the bound is 429 with Retry-After (the services' RetryInfo),
    another client of the same gateway is still 401, and a valid token still passes.
    Without it, every client of the gateway is the gateway's one address."""
    limit = PER_TOKEN
    stale = "stale-token"  # the gateway still has it; the services no longer do

    async def tries(http: httpx.AsyncClient, client: str, n: int) -> list[httpx.Response]:
        headers = {**bearer(stale), "X-Forwarded-For": client}
        return [await http.get(RUNS, headers=headers) for _ in range(n)]

    proxies, gateway_only = "127.0.0.1", f"{stale}:proj-p"
    async with (
        gateway_stack(
            database_url,
            tokens="gateway=gw-service-token:*:service",
            vouch_token="gw-service-token",
            trusted_proxies=proxies,
            gateway_tokens=gateway_only,
        ) as vouching,
        httpx.AsyncClient(base_url=vouching.base_url) as http,
    ):
        first = await tries(http, "192.0.2.1", limit + 2)
        assert [a.status_code for a in first] == [401] * limit + [429] * 2
        _refused_past_the_bound(first[-1], "TOO_MANY_FAILED_AUTHENTICATIONS")
        assert [a.status_code for a in await tries(http, "192.0.2.2", 1)] == [401]
        assert (await http.get(RUNS, headers=bearer(P_TOKEN))).status_code == 200
    async with (
        gateway_stack(database_url, trusted_proxies=proxies, gateway_tokens=gateway_only) as silent,
        httpx.AsyncClient(base_url=silent.base_url) as http,
    ):
        await tries(http, "192.0.2.1", limit)
        assert [a.status_code for a in await tries(http, "192.0.2.2", 1)] == [429]
        assert (await http.get(RUNS, headers=bearer(P_TOKEN))).status_code == 200
