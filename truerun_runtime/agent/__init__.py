"""The reference runtime agent (``truerun agent``; ``truerun-agent`` from the truerun-runtime
distribution): runs attempts as local processes, each under a supervisor of its own. Kept
import-light: the supervisor imports this package (and ``truerun_runtime``, whose names load
on first use)."""
