"""The comparison's report: both sides' rows side by side, then one summary line per side."""

from __future__ import annotations

from bench.longtask_dbos.scenario import SideResult

HEADER = (
    "| side | rounds | killed after the effect, before its answer, timeout and checkpoint "
    "| effects | duplicate effects | how the rounds ended |"
)


def row(side: SideResult | str, name: str) -> str:
    """A side's table row; a string is the reason the side was not run."""
    if isinstance(side, str):
        return f"| {name} | - | - | - | - | not run: {side} |"
    return (
        f"| {side.name} | {side.rounds} | {side.killed_in_window} | {side.effects} "
        f"| {side.duplicates} | {side.endings} |"
    )


def summary(side: SideResult | str, name: str) -> str:
    if isinstance(side, str):
        return f"{name}: not run ({side})"
    return f"{side.name}: {side.rounds} rounds, duplicate effects {side.duplicates}"


def report(sides: list[tuple[str, SideResult | str]]) -> str:
    lines = [HEADER, "|---|---|---|---|---|---|"]
    lines += [row(side, name) for name, side in sides]
    lines.append("")
    lines += [summary(side, name) for name, side in sides]
    return "\n".join(lines)
