"""truerun's side of the comparison. TO BE FILLED IN (the lead) once the long-task runtime,
its step driver, the attempt watcher and the API have landed; until then ``PLAY_ROUND`` is
None and the report prints truerun's row as not run.

The same scenario as the peer (bench/longtask_dbos/scenario.py), one round:

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

from bench.longtask_dbos.scenario import PlayRound

NAME = "truerun non_idempotent step"
# The lead's function goes here: PLAY_ROUND = play_round (a PlayRound).
PLAY_ROUND: PlayRound | None = None
