"""The long-task store: the only writer of the long-task tables (scripts/architecture.py)."""
