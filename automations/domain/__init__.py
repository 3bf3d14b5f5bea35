"""Pure rules of schedules: fire times, DST, overlap and catch-up decisions (no I/O)."""
