"""Pure rules of long tasks: states, transition tables, safe recovery, task-level completion
and the display folding. Nothing here performs I/O; every function is deterministic given
its inputs. docs/long-tasks.md is generated from these tables and held to them by a test.
"""
