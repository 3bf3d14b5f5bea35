"""The long-task door: every long-task write, each one transaction (docs/long-tasks.md)."""
