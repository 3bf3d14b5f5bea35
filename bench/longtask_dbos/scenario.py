"""The scenario both sides run, one round at a time: a step makes a non-idempotent effect at
the effect fixture, which records it and withholds its answer; once the effect is visible
(and its answer held) the process running the step is SIGKILLed, so the step cannot have
recorded that it finished; then the side recovers as it does by design, and the fixture
counts the effects made under the round's key. Every effect past the first is a duplicate.

A side is a ``PlayRound``: a callable given the ``Round`` (fixture URL, key, a directory of
its own) that returns the ``RoundOutcome``. ``kill_after_effect`` is the kill both sides use.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.longtask_dbos.env import ROOT
from bench.longtask_dbos.peer import STEP_TIMEOUT_S
from tests.support import effect_client
from tests.support.effect_fixture_process import wait_for_effect, wait_for_hang_up, wait_for_hold

RECOVERY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Round:
    number: int
    key: str  # the idempotency key the step sends; the fixture counts effects per key
    fixture_url: str
    work_dir: Path  # the round's own directory: databases, logs


@dataclass(frozen=True)
class Kill:
    """When the kill landed: after the effect was visible, while its answer was held."""

    effect_id: str
    after_effect_ms: int  # from the fixture recording the effect to the SIGKILL
    margin_s: float  # what was left of the step's own timeout at the kill

    @property
    def before_timeout(self) -> bool:
        return self.margin_s > 0


@dataclass(frozen=True)
class RoundOutcome:
    effects: int  # effects the fixture recorded under the round's key, after recovery
    kill: Kill
    ending: str  # how the side left the round (DBOS: the workflow's status; truerun: states)
    # whether the side had recorded the step as done when the kill landed (DBOS: the step's
    # checkpoint row; truerun: its receipt): must be False, or the round tested nothing
    recorded_done_at_kill: bool

    @property
    def duplicates(self) -> int:
        return max(0, self.effects - 1)


PlayRound = Callable[[Round], RoundOutcome]


@dataclass
class SideResult:
    name: str
    outcomes: list[RoundOutcome] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.outcomes)

    @property
    def effects(self) -> int:
        return sum(o.effects for o in self.outcomes)

    @property
    def duplicates(self) -> int:
        return sum(o.duplicates for o in self.outcomes)

    @property
    def killed_in_window(self) -> int:
        """Rounds killed after the effect, before its answer, its timeout and any record of
        the step as done."""
        return sum(
            1 for o in self.outcomes if o.kill.before_timeout and not o.recorded_done_at_kill
        )

    @property
    def endings(self) -> str:
        counts = Counter(o.ending for o in self.outcomes)
        return ", ".join(f"{ending} x{n}" for ending, n in sorted(counts.items()))


def run_side(name: str, play: PlayRound, rounds: int, fixture_url: str, work: Path) -> SideResult:
    """``rounds`` rounds of one side, each under a fresh key, one after another (the fixture's
    withhold switch is global)."""
    result = SideResult(name)
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    for number in range(1, rounds + 1):
        key = f"{slug}-{uuid.uuid4().hex[:8]}-{number}"
        round_dir = work / key
        round_dir.mkdir(parents=True)
        effect_client.control(fixture_url, withhold=True)
        outcome = play(Round(number, key, fixture_url, round_dir))
        result.outcomes.append(outcome)
    return result


def kill_after_effect(
    round_: Round, kill: Callable[[], None], step_timeout_s: float, deadline_s: float = 60.0
) -> Kill:
    """Wait until the fixture shows the round's effect and holds its answer, call ``kill``
    (a SIGKILL of the process running the step), confirm the caller hung up while still
    held (so no answer ever reached it), and switch withholding off for the recovery."""
    hung_up_before = effect_client.stats(round_.fixture_url)["holds"]["hung_up"]
    effect = wait_for_effect(round_.fixture_url, round_.key, deadline_s)
    wait_for_hold(round_.fixture_url, round_.key, deadline_s)
    kill()
    killed_at_ms = time.time_ns() // 1_000_000
    wait_for_hang_up(round_.fixture_url, round_.key, hung_up_before, deadline_s)
    effect_client.control(round_.fixture_url, withhold=False)
    after = killed_at_ms - int(effect["at_ms"])
    return Kill(str(effect["id"]), after, step_timeout_s - after / 1000)


class Child:
    """A process of the side's own in a new session, output to a log file in the round."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        with open(log, "wb") as out:
            self.popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.log.name} did not finish in {timeout_s:.0f} s") from None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def dbos_side(python: Path) -> PlayRound:
    """The peer: bench/longtask_dbos/peer.py in the DBOS venv, its system database a SQLite
    file of the round's own. Start the workflow, kill it inside the step, start the program
    again (DBOS.launch() recovers the pending workflow), wait for the workflow's end."""

    def play(round_: Round) -> RoundOutcome:
        sysdb = str(round_.work_dir / "dbos-system.sqlite")
        peer = [str(python), "-m", "bench.longtask_dbos.peer"]
        ident = ["--sysdb", sysdb, "--workflow-id", round_.key]
        first = Child(
            [*peer, "start", *ident, "--url", round_.fixture_url], round_.work_dir / "start.log"
        )
        try:
            kill = kill_after_effect(round_, first.kill, STEP_TIMEOUT_S)
        except Exception as err:
            raise RuntimeError(f"DBOS round {round_.number}: {err}\n{first.tail()}") from err
        finally:
            first.kill()
        checkpointed = _step_checkpointed(sysdb, round_.key)
        again = Child([*peer, "recover", *ident], round_.work_dir / "recover.log")
        code = again.wait(RECOVERY_TIMEOUT_S)
        ended = [line for line in again.tail().splitlines() if line.startswith("{")]
        if code != 0 or not ended:
            raise RuntimeError(f"DBOS recovery of round {round_.number} failed:\n{again.tail()}")
        status = json.loads(ended[-1])["status"]
        effects = effect_client.effects_of(round_.fixture_url, round_.key)
        return RoundOutcome(effects, kill, f"workflow {status}", checkpointed)

    return play


def _step_checkpointed(sysdb: str, workflow_id: str) -> bool:
    """Whether DBOS's system database holds the step's output (its checkpoint), read with
    nothing of DBOS's running; the workflow must still be PENDING."""
    with contextlib.closing(sqlite3.connect(sysdb)) as db:
        (status,) = db.execute(
            "SELECT status FROM workflow_status WHERE workflow_uuid = ?", (workflow_id,)
        ).fetchone()
        (outputs,) = db.execute(
            "SELECT count(*) FROM operation_outputs WHERE workflow_uuid = ?", (workflow_id,)
        ).fetchone()
    if status != "PENDING":
        raise RuntimeError(f"workflow {workflow_id} is {status} after the kill, not PENDING")
    return bool(outputs)
