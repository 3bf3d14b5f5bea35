"""The scheduler loop and the schedule commands, over the door and the store."""
