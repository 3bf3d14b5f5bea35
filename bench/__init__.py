"""Benchmarks; run them as modules (``python -m bench.transition``)."""

from __future__ import annotations

import os

# The load processes hold gRPC channels while they start subprocesses (pgbench, the pgqueuer
# worker, py-spy); with gRPC's fork handlers on, a child forked while gRPC threads are busy
# can crash before it execs (SIGSEGV in cygrpc, seen as "pgbench failed (exit -11)"). The
# benches fork only to exec, so they need no fork support. Read when grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
