"""schemathesis over the OpenAPI document a live stack serves, with a valid token, counting
instead of stopping at the first failure: requests made, 5xx answers, schema violations
(status code, content type or body not as the document says) and 429 answers. The smoke in
``make test`` (tests/gateway/test_schemathesis.py) runs a bounded number of examples per
operation and asserts all three counts are 0; ``make fuzz`` runs for a duration
(``FUZZ_SECONDS``, 300 by default) and prints the figures (docs/gateway.md "Tests").

    python -m tests.support.fuzz --seconds 300 [--database-url URL]

The schemathesis calls are synchronous, so they run in a worker thread while the stack
serves on the event loop. Streams are left out: they never end (tests/gateway/test_*stream*
cover them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import hypothesis
import hypothesis.errors
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core.result import Ok
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.gateway_stack import ALL, GatewayStack, bearer, gateway_stack

#: A violation is an answer the document does not describe.
CONFORMANCE: tuple[Callable[..., Any], ...] = (
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
)
#: Operations whose RPC the services do not implement yet.
PENDING: frozenset[str] = frozenset()
#: A failure's message is kept this long (the figures' examples).
_EXAMPLE_CHARS = 400


@dataclass
class Figures:
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    #: 429 answers to the valid token (operations whose credential is the bearer token; the
    #: tokenless ones are /healthz and the signed webhook delivery)
    token_429: int = 0
    #: (operation and mode, status) -> how many, for the statuses worth a look (401, 429, 5xx)
    notable: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: (operation, check) -> how many answers failed it
    violations: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: A few failures in full: (operation, what failed, the request, the answer)
    examples: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    @property
    def too_many(self) -> int:
        return self.token_429

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "operations": len(self.operations),
            "requests": self.requests,
            "responses_5xx": self.server_errors,
            "schema_violations": sum(self.violations.values()),
            "responses_429_to_the_valid_token": self.too_many,
            "responses_429": self.statuses[429],
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "violations": {f"{op} {check}": n for (op, check), n in self.violations.items()},
            "notable": {f"{op} -> {status}": n for (op, status), n in self.notable.items()},
            "examples": self.examples,
        }


@asynccontextmanager
async def fuzz_stack(database_url: str) -> AsyncIterator[tuple[GatewayStack, dict[str, Any], str]]:
    """A live stack with what the fuzzed paths name: a run waiting for approval, schedules
    "fuzz" (webhook enabled, so deliveries reach the signature check) and "doomed" (for
    DELETE), and long task "fuzz" (a generated etag is stale, so its commands are refused).
    Yields the stack, its served document and the run's id."""
    async with gateway_stack(database_url) as stack:
        async with httpx.AsyncClient(base_url=stack.base_url, headers=bearer(ALL)) as http:
            document = (await http.get("/v1/openapi.json")).json()
            created = await http.post(
                "/v1/projects/proj-p/runs",
                json={"owner_id": "alice", "task_id": "t", "requires_approval": True},
            )
            assert created.status_code == 201, created.text
            for schedule_id in ("fuzz", "doomed"):
                made = await http.post(
                    "/v1/projects/proj-p/schedules",
                    json={
                        "schedule_id": schedule_id,
                        "template": {"owner_id": "alice", "task_id": "t"},
                        "spec": {"interval": "3600s"},
                        "webhook_enabled": True,
                    },
                )
                assert made.status_code == 201, made.text
            task = await http.post(
                "/v1/projects/proj-p/longTasks",
                json={
                    "long_task_id": "fuzz",
                    "owner_id": "alice",
                    "goal": "g",
                    "steps": [
                        {"step_id": "s", "title": "s", "side_effect": "SIDE_EFFECT_CLASS_PURE"}
                    ],
                    "criteria": [{"criterion_id": "c", "text": "c"}],
                },
            )
            assert task.status_code == 201, task.text
        yield stack, document, created.json()["id"]


def fuzz(
    document: dict[str, Any],
    base_url: str,
    run_id: str,
    *,
    max_examples: int,
    negative_examples: int | None = None,
    seconds: float | None = None,
    modes: tuple[GenerationMode, ...] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE),
    unauthenticated: bool = False,
) -> Figures:
    """Every operation but the streams, ``max_examples`` requests the document allows, then
    ``negative_examples`` (default: as many) it does not: once (derandomized) without
    ``seconds``, else round after round with fresh seeds until ``seconds`` have passed.

    In each round the token operations go first, the tokenless ones (the signed webhook
    delivery, whose generated signatures are bad) after them: failed signatures count toward
    the failed-authentication bound (issue 37 build 4, coordinator/api/credentials.py), so
    a round's token requests are not answered by the bound its own deliveries tripped.

    ``unauthenticated``: also send the negative cases schemathesis makes without the token
    (it drops the Authorization header of some); by default every request carries it."""
    schema = schemathesis.openapi.from_dict(document)
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        if not operation.path.endswith(":stream") and operation.path not in PENDING:
            operations.append(operation)
    figures = Figures(operations=[f"{o.method.upper()} {o.path}" for o in operations])
    started = time.monotonic()
    deadline = None if seconds is None else started + seconds
    rounds = 0
    groups = [
        [o for o in operations if not _tokenless(o)],
        [o for o in operations if _tokenless(o)],
    ]
    while True:
        for group in groups:
            for mode in modes:
                for operation in group:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    _fuzz_operation(
                        operation,
                        mode,
                        base_url,
                        run_id,
                        figures,
                        max_examples
                        if mode is GenerationMode.POSITIVE or negative_examples is None
                        else negative_examples,
                        deadline,
                        rounds,
                        unauthenticated,
                    )
        rounds += 1
        if deadline is None or time.monotonic() >= deadline:
            break
    figures.seconds = time.monotonic() - started
    return figures


def _tokenless(operation: Any) -> bool:
    return bool(operation.definition.raw.get("security") == [])


def _fuzz_operation(
    operation: Any,
    mode: GenerationMode,
    base_url: str,
    run_id: str,
    figures: Figures,
    max_examples: int,
    deadline: float | None,
    seed: int,
    unauthenticated: bool,
) -> None:
    name = f"{operation.method.upper()} {operation.path}"
    shown = f"{name} ({mode.value})"
    schedule = "doomed" if operation.method.upper() == "DELETE" else "fuzz"
    known = {
        "project": "proj-p",
        "run": run_id,
        "owner": "alice",
        "schedule": schedule,
        "long_task": "fuzz",
    }
    strategy = operation.as_strategy(
        mode, path_parameters={k: v for k, v in known.items() if f"{{{k}}}" in operation.path}
    )

    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=deadline is None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: schemathesis.Case[Any]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            return
        if not unauthenticated:
            # a negative case may carry its own "authorization" (any case): sent beside ours,
            # the gateway would read that one and count its failures against this client
            for header in [h for h in case.headers or {} if h.lower() == "authorization"]:
                del case.headers[header]
            case.headers.update(bearer(ALL))
        response = case.call(base_url=base_url, headers=bearer(ALL), timeout=30)
        figures.requests += 1
        figures.statuses[response.status_code] += 1
        if response.status_code in (401, 429) or response.status_code >= 500:
            figures.notable[(shown, response.status_code)] += 1
        failed = []
        if response.status_code >= 500:
            failed.append("5xx")
        for conformance in CONFORMANCE:
            try:
                case.validate_response(response, checks=[conformance])
            except Exception as failure:  # each check's own failure type
                figures.violations[(name, conformance.__name__)] += 1
                failed.append(f"{conformance.__name__}: {failure}")
        # schemathesis's negative cases may drop the Authorization header whatever we set;
        # a 429 to those is the bound doing its job, not a refusal of the valid token
        sent = response.request.headers.get("Authorization")
        if (
            response.status_code == 429
            and not _tokenless(operation)
            and sent == bearer(ALL)["Authorization"]
        ):
            figures.token_429 += 1
            failed.append("429 to the valid token")
        if failed and len(figures.examples) < 20:
            request = response.request
            figures.examples.append(
                f"{shown}: {' | '.join(failed)}"[:_EXAMPLE_CHARS]
                + f" <- {request.method} {request.url} {request.body!r}"[:_EXAMPLE_CHARS]
                + f" -> {response.status_code} {response.text}"[:_EXAMPLE_CHARS]
            )

    if deadline is not None:
        # a seed per round and operation: the rounds of a timed run try other requests, and
        # a run of the target can be repeated
        check = hypothesis.seed(zlib.crc32(f"{seed}:{shown}".encode()))(check)
    try:
        check()
    except hypothesis.errors.Unsatisfiable:
        # nothing of the operation can be made invalid (no parameters, no body): its
        # negative mode has no example
        assert mode is GenerationMode.NEGATIVE, shown


async def _main(
    seconds: float, database_url: str, max_examples: int, unauthenticated: bool
) -> Figures:
    async with fuzz_stack(database_url) as (stack, document, run_id):
        return await asyncio.to_thread(
            fuzz,
            document,
            stack.base_url,
            run_id,
            max_examples=max_examples,
            seconds=seconds,
            unauthenticated=unauthenticated,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--database-url", default="", help="default: a new SQLite file")
    parser.add_argument("--max-examples", type=int, default=50, help="per operation per round")
    parser.add_argument(
        "--unauthenticated",
        action="store_true",
        help="also send the negative cases without the token (they count as failed "
        "authentications)",
    )
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        url = options.database_url or f"sqlite:///{scratch}/fuzz.db"
        figures = asyncio.run(
            _main(options.seconds, url, options.max_examples, options.unauthenticated)
        )
    print(json.dumps(figures.summary(), indent=2))
    clean = figures.server_errors == 0 and not figures.violations and figures.too_many == 0
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
