"""``bench.lifecycle --count-statements``: what one run (job) costs PostgreSQL, per side.

Without touching the server's configuration or restarting it (other work shares it):

- **Statements and commits** come from the server log. Each side's database gets
  ``ALTER DATABASE ... SET log_statement = 'all'`` (and ``log_parameter_max_length = 0``: no
  bind values in the log) before anything connects to it, so only that database's sessions
  log, and the database is dropped at the end. The log is read back over SQL
  (``pg_read_binary_file`` on ``pg_current_logfile()``, or on the backend's own stderr,
  ``/proc/self/fd/2``, when there is no logging collector), between two marker statements
  the harness runs in that database, keeping the lines of that database (``%d`` and ``%p`` of
  ``log_line_prefix``) and leaving out the harness's own backends. One logged entry is one
  statement as the client sent it (a simple-protocol string of several statements is one);
  commits are counted per backend: ``COMMIT``/``END``, and every statement outside
  ``BEGIN`` ... (autocommit, read-only ones included).
- **Rows and index entries** are ``pg_stat_user_tables`` deltas over the same window:
  inserted, updated (of which HOT), deleted; index entries ~ inserted x indexes + non-HOT
  updated x indexes. A partial index whose predicate is ``column IS NOT NULL`` counts the share
  of the table's rows that have the column (a run keeps its agent and scope for life, so that
  share is the share of writes that enter it); any other partial index counts every row (an
  upper bound: the claim order holds a run only while it is queued).
  PostgreSQL 15 flushes a backend's table counters at most once a second and an idle one's
  within 10 s, so each window waits ``settle_s`` (default 11 s) before its begin marker
  and before its end snapshot; what the first wait logs and writes is printed as the
  side's idle background (statements and commits logged while it waits; the rows counted
  then are mostly earlier work's counters arriving late, the warm-up's). Statements
  and commits are those between the begin marker and a ``done`` marker right after the round;
  the rows' window goes on through the second wait (the idle rows say what that adds).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import asyncpg
from sqlalchemy.engine import make_url

from tests.support.databases import pg_admin_url

MARKS = ("settle", "begin", "done", "end")
SETTLE_S = 11.0
NO_ROWS = (0, 0, 0, 0, 0)  # > PGSTAT_IDLE_INTERVAL (10 s): an idle backend's counters are flushed
CHUNK = 8 << 20
LOG_SETTINGS = {"log_statement": "'all'", "log_parameter_max_length": "0"}
PRESENCE_INDEXES_SQL = r"""
SELECT n.nspname || '.' || c.relname, substring(pg_get_expr(i.indpred, i.indrelid)
       FROM '^\(?(\w+) IS NOT NULL\)?$')
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE i.indpred IS NOT NULL AND n.nspname NOT IN ('pg_catalog', 'information_schema')
"""
TABLES_SQL = """
SELECT t.schemaname || '.' || t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
  FROM pg_stat_user_tables t
"""
LEVEL = (
    r"(?:DEBUG\d|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC"
    r"|DETAIL|HINT|QUERY|CONTEXT|STATEMENT|LOCATION)"
)
STATEMENT = re.compile(r"(?:statement|execute [^:]*):\s?(.*)", re.S)
# log_line_prefix escapes -> what they print; %p and %d are captured
PREFIX_PARTS = {
    "m": r"\S+ \S+(?: \S+)?",
    "t": r"\S+ \S+(?: \S+)?",
    "n": r"\S+",
    "p": r"(?P<pid>\d+)",
    "d": r"(?P<db>[^ ]*)",
    "u": r"[^ ]*",
    "a": r".*?",
    "l": r"\d+",
    "c": r"\S+",
    "s": r"\S+ \S+(?: \S+)?",
    "v": r"\S*",
    "x": r"\d*",
    "e": r"\w*",
    "r": r"\S*",
    "h": r"\S*",
    "b": r".*?",
    "i": r".*?",
    "Q": r"-?\d*",
    "%": "%",
}


async def enable(url: str) -> None:
    """Log every statement of ``url``'s database (for sessions opened from now on)."""
    name = make_url(url).database
    admin = await asyncpg.connect(pg_admin_url())
    try:
        for setting, value in LOG_SETTINGS.items():
            await admin.execute(f'ALTER DATABASE "{name}" SET {setting} = {value}')
    except asyncpg.InsufficientPrivilegeError as exc:
        raise RuntimeError(
            "--count-statements needs a superuser at TRUERUN_TEST_PG_ADMIN_URL (it sets"
            f" log_statement per database and reads the server log back): {exc}"
        ) from None
    finally:
        await admin.close()


def prefix_regex(prefix: str) -> re.Pattern[str]:
    """A log entry's first line: ``log_line_prefix`` as printed (what follows ``%q`` only in
    session lines), then ``LEVEL:  ``."""
    if "%p" not in prefix or "%d" not in prefix:
        raise RuntimeError(
            f"--count-statements needs %p and %d in log_line_prefix (it is {prefix!r})"
        )
    head, _, tail = prefix.partition("%q")
    pattern = _prefix_part(head) + (f"(?:{_prefix_part(tail)})?" if tail else "")
    return re.compile(f"^{pattern}(?P<level>{LEVEL}):  ")


def _prefix_part(prefix: str) -> str:
    out, i = [], 0
    while i < len(prefix):
        if prefix[i] == "%" and i + 1 < len(prefix):
            out.append(PREFIX_PARTS.get(prefix[i + 1], r".*?"))
            i += 2
        else:
            out.append(re.escape(prefix[i]))
            i += 1
    return "".join(out)


def normalize(sql: str) -> str:
    """One statement's shape: literals as ? (``$n`` kept), whitespace folded, <= 110 chars."""
    text = re.sub(r"'(?:[^']|'')*'", "?", sql)
    text = re.sub(r"(?<![\w$])\d+\b", "?", text)  # $n placeholders stay
    text = " ".join(text.split()) or "(empty query: a connection pool's check)"
    return text if len(text) <= 110 else text[:107] + "..."


@dataclass
class Tally:
    statements: int = 0
    commits: int = 0
    rollbacks: int = 0
    errors: int = 0
    shapes: Counter[str] = field(default_factory=Counter)


def tally(entries: Iterable[tuple[int, str, str]]) -> Tally:
    """Statements, commits and shapes of (pid, level, message) entries in log order."""
    out = Tally()
    in_tx: dict[int, bool] = defaultdict(bool)
    for pid, level, message in entries:
        if level == "ERROR":
            out.errors += 1
            continue
        if level != "LOG" or not (found := STATEMENT.match(message)):
            continue
        sql = found.group(1).strip()
        out.statements += 1
        out.shapes[normalize(sql)] += 1
        word = sql.split(None, 1)[0].rstrip(";").upper() if sql else ""
        if word in ("BEGIN", "START"):
            in_tx[pid] = True
        elif word in ("COMMIT", "END"):
            out.commits += 1
            in_tx[pid] = False
        elif word in ("ROLLBACK", "ABORT"):
            out.rollbacks += 1
            in_tx[pid] = False
        elif not in_tx[pid]:
            out.commits += 1  # autocommit
    return out


@dataclass
class TableDelta:
    inserted: int = 0
    updated: int = 0
    hot: int = 0
    deleted: int = 0
    index_entries: int = 0
    indexes: int = 0


@dataclass
class Count:
    side: str
    jobs: int
    window: Tally
    background: Tally
    settle_s: float
    tables: dict[str, TableDelta]
    idle_rows: int = 0  # rows counted (inserted + updated + deleted) while settling

    def total(self) -> TableDelta:
        out = TableDelta()
        for t in self.tables.values():
            out.inserted += t.inserted
            out.updated += t.updated
            out.hot += t.hot
            out.deleted += t.deleted
            out.index_entries += t.index_entries
        return out


class Counting:
    """The count windows of one bench run: ``window(side, url)`` per side, ``report()``."""

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self.settle_s = settle_s
        self.counts: list[Count] = []

    def window(self, side: str, url: str, jobs: int) -> CountWindow:
        return CountWindow(self, side, url, jobs)


class CountWindow:
    def __init__(self, counting: Counting, side: str, url: str, jobs: int) -> None:
        self.counting = counting
        self.side = side
        self.url = url
        self.jobs = jobs
        self.db = make_url(url).database or ""
        self.nonce = uuid.uuid4().hex
        self.exclude: set[int] = set()
        self.connection: asyncpg.Connection | None = None
        self.start = 0
        self.before: dict[str, tuple[int, ...]] = {}

    async def _mark(self, what: str) -> None:
        assert self.connection is not None
        await self.connection.execute(f"SELECT 'truerun-bench {self.nonce} {what}'")

    async def begin(self, exclude: Iterable[int] = ()) -> None:
        self.connection = await asyncpg.connect(self.url)
        self.exclude = {*exclude, await self.connection.fetchval("SELECT pg_backend_pid()")}
        self.log = await self.connection.fetchval(
            "SELECT coalesce(pg_current_logfile('stderr'), '/proc/self/fd/2')"
        )
        self.pattern = prefix_regex(await self.connection.fetchval("SHOW log_line_prefix"))
        self.start = await self._size()
        await self._mark("settle")
        settling = await self._tables()
        await asyncio.sleep(self.counting.settle_s)
        await self._mark("begin")
        self.before = await self._tables()
        self.idle_rows = sum(
            _written(now) - _written(settling.get(name, NO_ROWS))
            for name, now in self.before.items()
        )

    async def end(self) -> None:
        assert self.connection is not None
        await self._mark("done")
        await asyncio.sleep(self.counting.settle_s)
        after = await self._tables()
        weights = await self._index_weights(after)
        await self._mark("end")
        entries = await self._entries()
        await self.connection.close()
        at: dict[str, int] = {}
        for i, (_, _, message) in enumerate(entries):
            for word in MARKS:
                if f"truerun-bench {self.nonce} {word}'" in message:
                    at.setdefault(word, i)
        if len(at) != len(MARKS):
            raise RuntimeError(f"--count-statements: markers not found in {self.log} ({at})")
        theirs = [(i, e) for i, e in enumerate(entries) if e[0] not in self.exclude]
        background = tally(e for i, e in theirs if at["settle"] < i < at["begin"])
        window = tally(e for i, e in theirs if at["begin"] < i < at["done"])
        tables = {}
        for name, now in after.items():
            was = self.before.get(name, (0, 0, 0, 0, now[4]))
            ins, upd, hot, dele = (now[k] - was[k] for k in range(4))
            if ins or upd or dele:
                index_entries = round((ins + upd - hot) * weights.get(name, now[4]))
                tables[name] = TableDelta(ins, upd, hot, dele, index_entries, now[4])
        self.counting.counts.append(
            Count(
                self.side,
                self.jobs,
                window,
                background,
                self.counting.settle_s,
                tables,
                self.idle_rows,
            )
        )

    async def _size(self) -> int:
        assert self.connection is not None
        size: int = await self.connection.fetchval("SELECT (pg_stat_file($1)).size", self.log)
        return size

    async def _tables(self) -> dict[str, tuple[int, ...]]:
        assert self.connection is not None
        await self.connection.execute("SELECT pg_stat_clear_snapshot()")
        return {r[0]: tuple(r[1:]) for r in await self.connection.fetch(TABLES_SQL)}

    async def _index_weights(self, tables: dict[str, tuple[int, ...]]) -> dict[str, float]:
        """Per table, its indexes with each ``column IS NOT NULL`` one weighed by the share of
        the table's rows that have the column (the table's index count where there is none)."""
        assert self.connection is not None
        weights = {name: float(row[4]) for name, row in tables.items()}
        for table, column in await self.connection.fetch(PRESENCE_INDEXES_SQL):
            if column is None or table not in weights:
                continue
            share = await self.connection.fetchval(
                f'SELECT avg(("{column}" IS NOT NULL)::int)::float8 FROM {table}'
            )
            weights[table] -= 1.0 - (share if share is not None else 1.0)
        return weights

    async def _entries(self) -> list[tuple[int, str, str]]:
        """(pid, level, message) of this database's log entries since ``begin``."""
        assert self.connection is not None
        end = await self._size()
        raw = bytearray()
        for offset in range(self.start, end, CHUNK):
            length = min(CHUNK, end - offset)
            raw += await self.connection.fetchval(
                "SELECT pg_read_binary_file($1, $2, $3)", self.log, offset, length
            )
        kept: list[list[str]] = []
        current: list[str] | None = None
        for line in raw.decode("utf-8", "replace").split("\n"):
            found = self.pattern.match(line)
            if found is None:
                if current is not None:
                    current.append(line)  # a statement's next line
                continue
            current = None
            if found.group("db") == self.db:
                current = [found.group("pid"), found.group("level"), line[found.end() :]]
                kept.append(current)
        return [(int(e[0]), e[1], "\n".join(e[2:])) for e in kept]


def _written(row: tuple[int, ...]) -> int:
    inserted, updated, _hot, deleted = row[:4]
    return inserted + updated + deleted


def report(counts: list[Count], top: int = 15) -> str:
    """The per-run table, each side's idle background, and the breakdowns by statement
    shape and by table."""
    if not counts:
        return "statement counts: nothing counted"
    settle = counts[0].settle_s
    lines = [
        f"statement counts per run (log_statement = all, so not timed; settle {settle:g} s):",
        "| side | runs | statements | commits | rows inserted | rows updated (HOT) |"
        " rows deleted | index entries ~ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in counts:
        n, t = max(c.jobs, 1), c.total()
        lines.append(
            f"| {c.side} | {c.jobs} | {c.window.statements / n:.2f} | {c.window.commits / n:.2f}"
            f" | {t.inserted / n:.2f} | {t.updated / n:.2f} ({t.hot / n:.2f})"
            f" | {t.deleted / n:.2f} | {t.index_entries / n:.1f} |"
        )
    for c in counts:
        w, b = c.window, c.background
        lines.append(
            f"{c.side}: {w.statements} statements, {w.commits} commits, {w.rollbacks} rollbacks,"
            f" {w.errors} errors in the window; while settling before it ({settle:g} s):"
            f" {b.statements} statements, {b.commits} commits logged (idle background),"
            f" {c.idle_rows} rows counted (late counters, the warm-up's included)"
        )
    for c in counts:
        n, shapes = max(c.jobs, 1), c.window.shapes
        shown = shapes.most_common(top)
        share = sum(k for _, k in shown) / max(c.window.statements, 1)
        lines.append(
            f"{c.side}: statements per run by text (top {len(shown)} of {len(shapes)} shapes,"
            f" {share:.0%} of all):"
        )
        lines += [f"  {k / n:7.2f}  {shape}" for shape, k in shown]
        lines.append(f"{c.side}: rows per run by table (inserted / updated (HOT) / deleted):")
        for name, d in sorted(c.tables.items()):
            lines.append(
                f"  {name}: {d.inserted / n:.2f} / {d.updated / n:.2f} ({d.hot / n:.2f})"
                f" / {d.deleted / n:.2f}; {d.indexes} indexes, entries ~{d.index_entries / n:.1f}"
            )
    return "\n".join(lines)
