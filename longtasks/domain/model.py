"""The facts about one step that the pure rules read: its state, its side-effect class and
what is recorded for its current try (intent, receipt, evidence, probe, holder)."""

from __future__ import annotations

from dataclasses import dataclass

from longtasks.domain.states import ProbeResult, SideEffect, StepState


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan version, as far as the rules need it.

    ``intent_id``, ``receipt_id`` and ``probe`` belong to the current try: beginning a step
    again starts a new try with none of them (``StepMoved.fresh_try``). ``evidence`` holds
    references to trusted completion evidence bound to this step."""

    index: int
    state: StepState
    side_effect: SideEffect
    intent_id: str | None = None
    receipt_id: str | None = None
    evidence: tuple[str, ...] = ()
    probe: ProbeResult = ProbeResult.NOT_PROBED
    holder: str | None = None  # the attempt that holds it while it is running

    @property
    def intent(self) -> bool:
        return self.intent_id is not None

    @property
    def receipt(self) -> bool:
        return self.receipt_id is not None

    @property
    def open_intent(self) -> bool:
        """An intent without its receipt: the effect may have happened, or may not."""
        return self.intent and not self.receipt
