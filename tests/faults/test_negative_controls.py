"""Negative controls (issue #5, item 4): the fault suite must be able to fail.

For each patch in ``tests/faults/mutants/`` that breaks one guarantee (the start fence, the
event seq check, the unknown-holds-capacity rule, the claim lock, the schedule claim), the
committed tree (``git archive HEAD``: every file ``git ls-files`` lists) is copied to a
temporary directory, the patch is applied to the copy, and the few tests most relevant to
that guarantee are run *in the copy*; at least one of them must fail. An
unpatched copy runs the quick part of the same selections first and must pass, so a failure
is the mutant's doing and not the copy's.

The copy must run its own code, not the editable install's: pytest and every ``truerun``
process it starts get ``PYTHONPATH=<copy>:<copy>/protos/gen`` (the editable finder sits at
the end of ``sys.meta_path``, so the path entries win). ``_check_imports_the_copy`` proves it
for both, the test interpreter and the ``truerun`` console script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]
MUTANTS_DIR = Path(__file__).with_name("mutants")
TRUERUN = str(Path(sys.executable).with_name("truerun"))
COPY_MARKER = "negative-control-copy"
RUN_TIMEOUT_S = 420.0

# Per mutant, the tests that guard the broken guarantee: the fault tests first, then the
# quicker unit / contract / integration tests that also cover it.
SELECTIONS: dict[str, tuple[str, ...]] = {
    "1_start_fence": (
        "tests/faults/test_cancel_phases.py::test_cancel_in_each_phase[running]",
        "tests/unit/test_transitions_exhaustive.py"
        "::test_cancel_after_the_fence_only_records_the_request",
        "tests/integration/test_runtime_protocol.py"
        "::test_cancel_after_start_is_cancelling_until_the_runtime_confirms[postgres]",
    ),
    "2_seq_check": (
        "tests/e2e/test_real_runs.py::test_server_sigkill_mid_run_loses_no_events[postgres]",
        "tests/integration/test_runtime_protocol.py"
        "::test_missing_out_of_order_and_after_terminal_events_change_nothing[postgres]",
    ),
    "3_unknown_capacity": (
        "tests/faults/test_cancel_phases.py::test_cancel_in_each_phase[unknown]",
        "tests/faults/test_scenarios.py::test_s1_kill_agent_holding_two_runs",
        "tests/e2e/test_real_runs.py"
        "::test_agent_killed_and_never_restarted_is_unknown_and_holds_capacity[postgres]",
        "tests/contract/test_claims.py::test_unknown_attempt_keeps_its_slot[postgres]",
    ),
    "4_claim_lock": ("tests/integration/test_claim_race.py::test_two_processes_never_over_commit",),
    # Neither the row lock nor the version compare alone: either one keeps a fire to one
    # round (the test passes with one of them gone); without both a fire is handled again.
    "5_schedule_claim": (
        "tests/faults/test_scheduler_replicas.py"
        "::test_three_scheduler_replicas_fire_each_time_exactly_once",
    ),
}
# What a selection's run adds to the environment: the scheduler fault test at a third of its
# size (each fire is handled by every replica once the claim is gone; 100 fires show it).
ENVIRONMENT: dict[str, dict[str, str]] = {
    "5_schedule_claim": {"TRUERUN_SCHEDULER_FAULT_FIRES": "100"},
}
# The baseline (unpatched copy) runs these; the slow process-level ones are covered by the
# suite itself on the real tree.
BASELINE = (
    "tests/unit/test_transitions_exhaustive.py"
    "::test_cancel_after_the_fence_only_records_the_request",
    "tests/integration/test_runtime_protocol.py"
    "::test_missing_out_of_order_and_after_terminal_events_change_nothing[postgres]",
    "tests/contract/test_claims.py::test_unknown_attempt_keeps_its_slot[postgres]",
)


@dataclass
class Verdict:
    name: str
    ran: int = 0
    failed: int = 0
    seconds: float = 0.0
    failed_ids: list[str] = field(default_factory=list)


def _copy_tree(dest: Path) -> None:
    """The committed tree (every file ``git ls-files`` lists, as of HEAD) into ``dest``: the
    guarantees under test are the committed ones, whatever else the working tree holds."""
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, timeout=120
    )
    assert archive.returncode == 0, archive.stderr.decode()
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=120)
    # Mark the copy's CLI docstring (`truerun --help` prints it): see _check_imports_the_copy.
    main = dest / "services" / "cli" / "main.py"
    text = main.read_text()
    end = text.index('"""', 3)
    main.write_text(f"{text[:end]} [{COPY_MARKER}]{text[end:]}")


def _env(copy: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = f"{copy}{os.pathsep}{copy / 'protos' / 'gen'}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _check_imports_the_copy(copy: Path, env: dict[str, str]) -> None:
    probe = (
        "import coordinator.domain.decide, capacity.store.postgres, "
        "truerun_runtime.agent.supervisor, tests.support.processes, truerun.v1.common_pb2 as pb\n"
        "for m in (coordinator.domain.decide, capacity.store.postgres, "
        "truerun_runtime.agent.supervisor, tests.support.processes, pb):\n"
        "    print(m.__file__)"
    )
    files = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert len(files) == 5 and all(f.startswith(str(copy)) for f in files), files
    # The console script the tests start (`truerun dev`, `truerun agent`, ...) prints the
    # copy's own docstring only if it imported the copy's services.cli.main.
    helped = subprocess.run(
        [TRUERUN, "--help"], cwd=copy, env=env, capture_output=True, text=True, timeout=60
    )
    assert COPY_MARKER in helped.stdout, helped.stdout + helped.stderr


def _apply(copy: Path, patch: Path) -> None:
    subprocess.run(
        ["git", "apply", "--verbose", str(patch)],
        cwd=copy,
        check=True,
        capture_output=True,
        timeout=60,
    )


def _run(name: str, copy: Path, env: dict[str, str], node_ids: tuple[str, ...]) -> Verdict:
    report = copy / f"junit-{name}.xml"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    argv += ["--junitxml", str(report), "-o", "junit_family=xunit2", *node_ids]
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=copy, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    verdict = Verdict(name, seconds=time.monotonic() - started)
    if not report.exists():
        raise AssertionError(f"{name}: pytest wrote no report:\n{done.stdout[-3000:]}")
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        verdict.ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            verdict.failed += 1
            verdict.failed_ids.append(f"{case.get('classname')}::{case.get('name')}")
    if verdict.ran == 0:
        raise AssertionError(f"{name}: no test ran:\n{done.stdout[-3000:]}")
    return verdict


def _table(verdicts: list[Verdict]) -> str:
    lines = [f"{'mutant':<20} {'tests run':>9} {'failed':>7} {'rate':>6} {'seconds':>8}"]
    for v in verdicts:
        rate = f"{v.failed / v.ran:.0%}" if v.ran else "-"
        lines.append(f"{v.name:<20} {v.ran:>9} {v.failed:>7} {rate:>6} {v.seconds:>8.1f}")
    return "\n".join(lines)


def test_every_mutant_is_detected(tmp_path: Path) -> None:
    patches = sorted(MUTANTS_DIR.glob("*.patch"))
    assert [p.stem for p in patches] == sorted(SELECTIONS), "a mutant without tests, or tests "
    verdicts: list[Verdict] = []

    baseline_copy = tmp_path / "baseline"
    _copy_tree(baseline_copy)
    env = _env(baseline_copy)
    _check_imports_the_copy(baseline_copy, env)
    baseline = _run("(none: baseline)", baseline_copy, env, BASELINE)
    verdicts.append(baseline)
    shutil.rmtree(baseline_copy)

    for patch in patches:
        copy = tmp_path / patch.stem
        _copy_tree(copy)
        _apply(copy, patch)
        env = _env(copy) | ENVIRONMENT.get(patch.stem, {})
        _check_imports_the_copy(copy, env)
        verdicts.append(_run(patch.stem, copy, env, SELECTIONS[patch.stem]))
        shutil.rmtree(copy)

    print("\nnegative controls (a mutant is detected when at least one test fails):")
    print(_table(verdicts))
    for v in verdicts[1:]:
        print(f"  {v.name}: failed {v.failed_ids}")
    assert baseline.failed == 0, f"the unpatched copy fails: {baseline.failed_ids}"
    undetected = [v.name for v in verdicts[1:] if v.failed == 0]
    assert not undetected, f"mutants no test detected: {undetected}\n{_table(verdicts)}"
