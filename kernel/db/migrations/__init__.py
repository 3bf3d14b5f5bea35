"""Alembic migrations for kernel.db.schema; run them through kernel.db.migrate."""
