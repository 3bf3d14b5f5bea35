"""Pure domain of truerun: states, transition rules, commands and the display state.

Nothing in this package performs I/O; every function is deterministic given its inputs.
"""
