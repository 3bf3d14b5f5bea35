"""The runtime's half of verification: each live criterion whose checker kind the runtime
knows (``checkers.CHECKERS``) is checked here, read-only, and becomes a verdict with its
evidence; every other criterion (a server-side checker, or a subjective one) gets no verdict
from the runtime. truerun binds the evidence to the criterion and decides completion."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from google.protobuf import json_format
from truerun.v1 import long_task_service_pb2 as pb

from .attempt import evidence
from .checkers import FAILED, PASSED, CheckResult, run_checker, source_of

RESULTS = {
    PASSED: pb.CRITERION_RESULT_PASSED,
    FAILED: pb.CRITERION_RESULT_FAILED,
}


def verdict(criterion_id: str, kind: str, checked: CheckResult) -> pb.Verdict:
    result = RESULTS.get(checked.result, pb.CRITERION_RESULT_UNPROVEN)
    proofs = [evidence(e.kind, e.reference, e.summary, render=e.render) for e in checked.evidence]
    if not proofs:  # the checker's reason is the record of why it is failed or unproven
        proofs = [evidence("check", source_of(kind), checked.why[:1000])]
    return pb.Verdict(
        criterion_id=criterion_id, source=source_of(kind), result=result, evidence=proofs
    )


async def check_criteria(
    criteria: Sequence[pb.Criterion], *, cwd: Path, env: Mapping[str, str]
) -> list[pb.Verdict]:
    """The verdicts of the runtime's checkers, one per criterion it can check."""
    verdicts = []
    for criterion in criteria:
        kind = criterion.checker_kind
        params = json_format.MessageToDict(criterion.checker)
        checked = await asyncio.to_thread(run_checker, kind, params, cwd=cwd, env=env)
        if checked is not None:
            verdicts.append(verdict(criterion.criterion_id, kind, checked))
    return verdicts
