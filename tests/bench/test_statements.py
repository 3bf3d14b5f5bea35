"""The statement counter's pure parts (bench/statements.py): reading log lines as PostgreSQL
prints them with Debian's log_line_prefix, counting statements and commits per backend, and
folding statements to their shapes. The whole counter runs in
tests/bench/test_benches_run.py::test_lifecycle_counts_statements_per_run."""

from __future__ import annotations

import pytest

from bench.statements import normalize, prefix_regex, tally

DEBIAN = "%m [%p] %q%u@%d "


def test_the_prefix_finds_pid_and_database_and_leaves_background_lines_without_one() -> None:
    pattern = prefix_regex(DEBIAN)
    session = "2026-12-02 07:10:45.618 UTC [4242] postgres@truerun_t_ab LOG:  statement: BEGIN"
    found = pattern.match(session)
    assert found is not None
    assert (found.group("pid"), found.group("db"), found.group("level")) == (
        "4242",
        "truerun_t_ab",
        "LOG",
    )
    assert session[found.end() :] == "statement: BEGIN"
    checkpoint = "2026-12-02 07:10:45.779 UTC [2219] LOG:  checkpoint starting: time"
    found = pattern.match(checkpoint)
    assert found is not None and found.group("db") is None
    assert pattern.match("    WHERE id = $1") is None  # a statement's next line


def test_a_prefix_without_pid_or_database_is_refused() -> None:
    with pytest.raises(RuntimeError, match="%p and %d"):
        prefix_regex("%m ")


def test_commits_are_counted_per_backend_with_autocommit_statements() -> None:
    entries = [
        (1, "LOG", "statement: BEGIN;"),
        (2, "LOG", "execute __asyncpg_stmt_1__: SELECT 1"),  # autocommit: one commit
        (1, "LOG", "execute __asyncpg_stmt_2__: UPDATE runs SET version = $1"),
        (1, "LOG", "statement: COMMIT;"),
        (3, "LOG", "statement: BEGIN"),
        (3, "ERROR", "duplicate key value violates unique constraint"),
        (3, "LOG", "statement: ROLLBACK"),
        (2, "LOG", "execute <unnamed>: "),  # psycopg_pool's check: an empty query
        (2, "LOG", "connection authorized: user=postgres"),  # not a statement
    ]
    counted = tally(entries)
    assert (counted.statements, counted.commits, counted.rollbacks, counted.errors) == (
        7,
        3,
        1,
        1,
    )
    assert counted.shapes["SELECT ?"] == 1
    assert counted.shapes["(empty query: a connection pool's check)"] == 1


def test_shapes_fold_literals_and_whitespace() -> None:
    sql = "SELECT 'truerun-bench 12 begin',\n   42  FROM runs WHERE id = $1 AND n = 'it''s'"
    assert normalize(sql) == "SELECT ?, ? FROM runs WHERE id = $1 AND n = ?"
    assert len(normalize("SELECT " + "x, " * 100)) == 110
