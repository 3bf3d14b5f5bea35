"""Persistence of runs, attempts and events: one protocol, a PostgreSQL and a SQLite twin."""
