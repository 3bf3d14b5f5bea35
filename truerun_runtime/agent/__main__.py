"""``python -m truerun_runtime.agent ...`` is ``truerun agent ...``."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
