"""The notices outbox (docs/long-tasks.md "Notices"), on the one ``metadata``: a notice is
written in the transaction of the long-task change it tells about, one row per fact (its
``dedupe_key`` is unique: a second writer of the same interruption inserts nothing), with
one delivery row per webhook subscription of the task's owner in the same commit. Written
only by ``longtasks/store/``.

A subscription stores no secret: its signing secret is derived from TRUERUN_WEBHOOK_KEY,
the subscription's id and its generation (kernel/webhook_signing.py), shown once."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from kernel.db.meta import ID, metadata

long_task_notices = Table(
    "long_task_notices",
    metadata,
    Column("id", ID, primary_key=True),
    Column("task_id", ID, ForeignKey("long_tasks.id"), nullable=False),
    Column("project_id", String(128), nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("handle", Integer, nullable=False),
    Column("kind", String(32), nullable=False),  # interruption | decision | approval | terminal
    Column("dedupe_key", String(256), nullable=False),
    Column("decision_id", ID, nullable=True),  # the decision or approval to answer
    Column("task_state", String(32), nullable=False),  # the task's state the change made
    Column("task_version", BigInteger, nullable=False),  # its etag then (answers send it)
    Column("title", String(256), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    # the task's source, copied (0019): where else the notice is shown
    Column("source_run_id", ID, nullable=True),
    Column("source_ref", String(2048), nullable=False, server_default=text("''")),
    Column("command", String(512), nullable=False, server_default=text("''")),  # the answer
    UniqueConstraint("dedupe_key"),
    Index("ix_long_task_notices_owner_created", "project_id", "owner_id", "created_at_ms"),
    Index("ix_long_task_notices_task", "task_id"),  # retention trims by task
)

# A webhook an owner registered for their notices in one project.
long_task_notice_webhooks = Table(
    "long_task_notice_webhooks",
    metadata,
    Column("id", ID, primary_key=True),
    Column("project_id", String(128), nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("generation", Integer, nullable=False, server_default=text("1")),
    Column("created_by", String(256), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    UniqueConstraint("project_id", "owner_id", "url"),
)

# One notice to one webhook: pending until a 2xx, retried with backoff, dead after the
# configured number of tries (TRUERUN_NOTICE_MAX_DELIVERIES); never deleted by a retry.
long_task_notice_deliveries = Table(
    "long_task_notice_deliveries",
    metadata,
    Column("id", ID, primary_key=True),
    Column("notice_id", ID, ForeignKey("long_task_notices.id"), nullable=False),
    # named: the convention's name is longer than PostgreSQL's 63 characters
    Column(
        "webhook_id",
        ID,
        ForeignKey(
            "long_task_notice_webhooks.id", name="fk_long_task_notice_deliveries_webhook_id"
        ),
        nullable=False,
    ),
    Column("project_id", String(128), nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivered | dead
    Column("tries", Integer, nullable=False, server_default=text("0")),
    Column("next_at_ms", BigInteger, nullable=False),  # due (pending) or claimed until
    Column("last_status", Integer, nullable=True),  # the receiver's HTTP status
    Column("last_error", String(512), nullable=False, server_default=text("''")),
    Column("delivered_at_ms", BigInteger, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    UniqueConstraint("notice_id", "webhook_id"),
    Index("ix_long_task_notice_deliveries_due", "state", "next_at_ms"),
    Index("ix_long_task_notice_deliveries_notice", "notice_id"),
)

NOTICE_TABLES = (long_task_notices, long_task_notice_webhooks, long_task_notice_deliveries)
