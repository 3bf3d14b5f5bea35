"""Migration scripts; alembic loads them by path, never by import."""
