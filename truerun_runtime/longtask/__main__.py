"""``python -m truerun_runtime.longtask``: the step driver of a long-task attempt (the
reference agent starts it for a Start whose spec has ``long_task``); ``python -m
truerun_runtime.longtask tools``: the tool runner of an ordinary run whose spec declares
``tools`` (``tools.py``; the section in TRUERUN_TOOLS). Works in the current directory; reads
TRUERUN_SERVER, TRUERUN_RUN_ID, TRUERUN_ATTEMPT_ID, TRUERUN_CALLBACK_TOKEN (and TRUERUN_TLS_*
for TLS) from the environment."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from .attempt import AttemptConfigError, LongTaskAttempt
from .driver import NOT_RUNNABLE, StepDriver
from .tools import run_tools

TOOLS_COMMAND = "tools"


async def _main() -> int:
    if sys.argv[1:] == [TOOLS_COMMAND]:
        return await run_tools()
    if sys.argv[1:]:
        print(f"truerun long task: usage: [{TOOLS_COMMAND}]", file=sys.stderr)
        return NOT_RUNNABLE
    try:
        attempt = LongTaskAttempt.from_env()
    except (AttemptConfigError, ValueError) as error:
        print(f"truerun long task: {error}", file=sys.stderr)
        return NOT_RUNNABLE
    async with attempt:
        return await StepDriver(attempt, cwd=Path.cwd()).run()


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("TRUERUN_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s truerun long task: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(_main())


if __name__ == "__main__":
    sys.exit(main())
