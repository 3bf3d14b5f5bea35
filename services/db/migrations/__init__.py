"""Alembic migrations for services.db.schema; run them through services.db.migrate."""
