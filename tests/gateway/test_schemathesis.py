"""Property-based run of the served OpenAPI document against a live stack (SQLite), with a
valid token: for every non-streaming operation, generated requests never get a 5xx, never a
429, and every answer's status, content type and body conform to the document (0 schema
violations). The smoke of ``make fuzz`` (tests/support/fuzz.py, which runs the same for a
duration): bounded (MAX_EXAMPLES and NEGATIVE_EXAMPLES per operation, derandomized), so it
stays under 40 s. The webhook delivery goes last (its bad signatures count toward the
failed-authentication bound: tests/support/fuzz.py).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.fuzz import PENDING, fuzz, fuzz_stack

MAX_EXAMPLES = 25
NEGATIVE_EXAMPLES = 8  # requests the document does not allow: slower to make
OPERATIONS = 57  # every operation of the document but the streams


@pytest.mark.slow
async def test_generated_requests_never_5xx_or_429_and_conform_to_the_document(
    sqlite_url: str,
) -> None:
    async with fuzz_stack(sqlite_url) as (stack, document, run_id):
        figures = await asyncio.to_thread(
            fuzz,
            document,
            stack.base_url,
            run_id,
            max_examples=MAX_EXAMPLES,
            negative_examples=NEGATIVE_EXAMPLES,
        )
    summary = json.dumps(figures.summary(), indent=2)
    assert len(figures.operations) == OPERATIONS - len(PENDING), figures.operations
    assert figures.requests >= len(figures.operations), summary
    assert figures.server_errors == 0, summary
    assert not figures.violations, summary
    assert figures.too_many == 0, summary
