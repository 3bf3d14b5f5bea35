"""truerun's side of the comparison: the same scenario as the peer
(bench/longtask_dbos/scenario.py), one round:

1. ``truerun dev`` and the reference agent as real processes (tests/support/processes.py),
   on a database of the round's own under ``round_.work_dir``.
2. Create a long task whose one step is a declared command, side effect ``non_idempotent``:
   ``python -m tests.support.effect_client post --url {round_.fixture_url} --key {round_.key}
   --target <any> --timeout-s <T>`` with the receipt parser reading its JSON line
   (``external_id``, ``target``, ``summary``, ``at_ms``).
3. ``kill = kill_after_effect(round_, <SIGKILL the agent and the step's command>, T)``: the
   intent is recorded (the SDK writes it before the command may run), the effect is at the
   fixture, its answer is held, so no receipt can exist.
4. Let recovery run (the watcher sees the attempt's run end); wait, with a deadline, until
   the task is ``waiting_for_user`` with an ``effect`` decision and the step ``uncertain``.
5. ``RoundOutcome(effect_client.effects_of(round_.fixture_url, round_.key), kill,
   "waiting_for_user, step uncertain")``: expected 1 effect, 0 duplicates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from truerun.v1 import long_task_service_pb2 as pb

from bench.longtask_dbos.scenario import PlayRound, Round, RoundOutcome, kill_after_effect
from tests.faults.longtask_api import LongTasks, open_decisions, state, step, step_state
from tests.support import effect_client
from tests.support.auth import sync_channel
from tests.support.processes import Processes, kill_tasks

NAME = "truerun non_idempotent step"
OWNER, PROJECT = "bench", "bench"
STEP_TIMEOUT_S = 120.0  # the effect client's own timeout in the step's command
RECOVERY_S = 60.0
ROOT = Path(__file__).resolve().parents[2]


def _draft(round_: Round) -> dict[str, object]:
    post = (
        f"PYTHONPATH={ROOT} {sys.executable} -m tests.support.effect_client post"
        f" --url {round_.fixture_url} --key {round_.key} --target chat:{round_.key}"
        f" --timeout-s {STEP_TIMEOUT_S:.0f}"
    )
    return {
        "ownerId": OWNER,
        "goal": f"post one message ({round_.key})",
        "steps": [
            {
                "stepId": "send",
                "title": "post the message",
                "sideEffect": "SIDE_EFFECT_CLASS_NON_IDEMPOTENT",
                "action": {"run": post, "receipt": "json", "target": f"chat:{round_.key}"},
            }
        ],
        "criteria": [
            {
                "criterionId": "sent",
                "text": "the message was posted",
                "checkerKind": "receipt_present",
                "checker": {"step_id": "send"},
            }
        ],
    }


def play_round(round_: Round) -> RoundOutcome:
    procs = Processes(round_.work_dir / "logs")
    (round_.work_dir / "logs").mkdir(exist_ok=True)
    try:
        dev = procs.dev(round_.work_dir / "data")
        agent_dir = round_.work_dir / "agent"
        agent = procs.agent(dev.address, dev.token(), OWNER, agent_dir)
        raw, channel = sync_channel(dev.address, dev.api_token())
        try:
            tasks = LongTasks(channel, project_id=PROJECT)
            task_id = tasks.create(_draft(round_)).long_task_id

            def crash() -> None:  # the agent, the step's process, and truerun itself
                agent.kill()
                kill_tasks(agent_dir)
                dev.kill()

            kill = kill_after_effect(round_, crash, STEP_TIMEOUT_S)
            restarted = procs.dev(round_.work_dir / "data", grpc_addr=dev.address)
            procs.agent(restarted.address, restarted.token(), OWNER, agent_dir)
            task = tasks.wait(
                task_id, _asked, RECOVERY_S, "waiting_for_user with an effect question"
            )
            send = step(task, "send")
            ending = f"{state(task)}, step {step_state(send)}"
            effects = effect_client.effects_of(round_.fixture_url, round_.key)
            # the record a kill cannot change: did any try of the step hold its receipt?
            receipted = any(e.HasField("receipt") for e in send.effects)
            return RoundOutcome(effects, kill, ending, receipted)
        finally:
            raw.close()
    finally:
        procs.close()


def _asked(task: pb.LongTask) -> bool:
    return state(task) == "waiting_for_user" and any(
        d.kind == "effect" for d in open_decisions(task)
    )


PLAY_ROUND: PlayRound | None = play_round
