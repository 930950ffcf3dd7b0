"""The state store: where the platform keeps what must outlive a process and be shared by the
sensor, the runs and the CLI (the delta index, the change-stream ledger, the sync cursors).

Two backends behind one small interface, chosen by URL:
- SQLite (a file path): the embedded default, for one machine. WAL mode, so
  readers never wait for the writer; a transaction takes the file's write lock up front
  (BEGIN IMMEDIATE).
- PostgreSQL (`postgresql://user@host:port/db`): for deployments where the daemon, the run
  workers and the CLI run on several hosts. A transaction takes a transaction-scoped advisory
  lock named by its `scope` first, so writers of one scope (the index, one source's ledger) are
  serialized across hosts exactly as SQLite serializes them on one; the lock goes with the
  commit or the rollback, also when a client dies.

What flows through: SQL written once in the subset both engines share (`?` placeholders,
INSERT ... ON CONFLICT, types INTEGER/TEXT/BLOB, which PostgreSQL reads as BIGINT/TEXT/BYTEA).
Guarantees: a `transaction` commits on exit and rolls back on any exception; `migrate` brings a
component's tables to the version this code knows, once, under a lock, and refuses a store a
newer deltaport has migrated further. The password never sits in the URL or in a repr: it is
read from the environment variable `password_env` when a connection is opened.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from decimal import Decimal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from resources.errors import DeltaportError

SQLITE, POSTGRES = "sqlite", "postgresql"


class StateStoreError(DeltaportError):
    """The state store cannot be reached or is not usable by this deltaport."""


_SQLITE_WAIT_SECONDS = 30.0

_VERSIONS = """CREATE TABLE IF NOT EXISTS state_schema (
  component TEXT PRIMARY KEY, version INTEGER NOT NULL, migrated_at TEXT NOT NULL)"""


class StateStore:
    """A handle on one store (picklable: a run's input may carry it to another process)."""

    def __init__(self, url: str | Path, *, password_env: str | None = None):
        self.url = str(url)
        self.password_env = password_env
        self.dialect = POSTGRES if self.url.startswith(("postgresql://", "postgres://")) else SQLITE
        self._local = threading.local()
        self._migrated: set[str] = set()

    # --- identity -------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The SQLite file (SQLite stores only)."""
        if self.dialect != SQLITE:
            raise StateStoreError(f"{self.where} is not a file")
        return Path(self.url)

    @property
    def where(self) -> str:
        """How errors name the store: the file, or the URL without any password."""
        if self.dialect == SQLITE:
            return str(self.path)
        parts = urlsplit(self.url)
        netloc = parts.netloc.rsplit("@", 1)
        if len(netloc) == 2:
            netloc[0] = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc="@".join(netloc)))

    def __repr__(self) -> str:
        return f"StateStore({self.where!r})"

    def __getstate__(self) -> dict:
        return {"url": self.url, "password_env": self.password_env}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], password_env=state["password_env"])

    # --- connections ----------------------------------------------------------------------
    @contextmanager
    def connect(self) -> Iterator["Connection"]:
        """A connection in autocommit mode: each statement sees what was committed before it."""
        if self.dialect == SQLITE:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=_SQLITE_WAIT_SECONDS, isolation_level=None)
            try:
                _wal(db, self.where)
                db.execute("PRAGMA synchronous=NORMAL")
                yield Connection(db, SQLITE)
            finally:
                db.close()
        else:
            # One connection per thread and process, kept: opening one costs a round trip or
            # three (and TLS), more than the statements the platform runs on it.
            conn = getattr(self._local, "conn", None)
            if conn is not None and (conn.closed or getattr(self._local, "pid", None) != os.getpid()
                                     or _ended_by_server(conn) or self._lost_while_idle(conn)):
                self._drop(conn)  # cut while it was kept (a restart, a failover): a new one
                conn = None
            if conn is None:
                conn = self._pg_connect()
                self._local.conn, self._local.pid = conn, os.getpid()
            try:
                yield Connection(conn, POSTGRES)
                self._local.used = time.monotonic()
            except BaseException as exc:
                if conn.closed or conn.get_transaction_status() != 0:  # not idle: drop it, do not reuse
                    self._drop(conn)
                if _connection_lost(exc):
                    raise StateStoreError(f"state store {self.where}: the connection was lost "
                                          f"({_first_line(exc)}); the work in hand was cut short and is "
                                          "retried by the next tick, run or sync") from exc
                raise

    def _lost_while_idle(self, conn) -> bool:
        """Whether a connection kept idle for over a second is gone, asked with one round trip.
        The server's goodbye is not always in when the next statement comes (`_ended_by_server`
        saw nothing in 1 of a few runs of test_postgres_faults under load, and the run's read
        failed): a connection that waited that long pays a round trip to be sure, a busy one does
        not."""
        if time.monotonic() - getattr(self._local, "used", 0.0) < _IDLE_CHECK_SECONDS:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            return False
        except Exception:  # noqa: BLE001 - any failure of a ping: the connection is not to be reused
            return True

    @contextmanager
    def transaction(self, scope: str) -> Iterator["Connection"]:
        """A connection inside one transaction that holds the write lock of `scope` (SQLite: the
        file's), committed on exit, rolled back on any exception.

        A kept PostgreSQL connection the server ended a moment ago can still look idle (the
        goodbye is not in yet): when its BEGIN finds it lost, nothing of the transaction has run,
        so it begins once more on a new connection instead of failing the caller's work."""
        for attempt in range(2):
            with self.connect() as db:
                try:
                    if self.dialect == SQLITE:
                        db.raw.execute("BEGIN IMMEDIATE")
                    else:
                        db.raw.cursor().execute("BEGIN")
                        db.raw.cursor().execute("SELECT pg_advisory_xact_lock(hashtext('deltaport'), hashtext(%s))",
                                                (scope,))
                except Exception as exc:
                    if attempt == 0 and self.dialect != SQLITE and _connection_lost(exc):
                        self._drop(db.raw)
                        continue
                    raise
                try:
                    yield db
                except BaseException:
                    _quietly(lambda: db.execute("ROLLBACK"))
                    raise
                db.execute("COMMIT")
                return

    @contextmanager
    def hold(self, scope: str) -> Iterator[bool]:
        """Try to hold the lock of `scope` for the duration of the block (not one transaction: a
        whole `sync` pass of a source), across processes and, on PostgreSQL, hosts. Yields whether it
        is held; never waits. Released on exit, or when the holder dies."""
        if self.dialect == SQLITE:
            import fcntl

            lock = self.path.with_name(f"{self.path.name}.{re.sub(r'[^A-Za-z0-9_.-]', '_', scope)}.lock")
            lock.parent.mkdir(parents=True, exist_ok=True)
            with open(lock, "a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield False
                    return
                try:
                    yield True
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)
            return
        conn = self._pg_connect()  # its own session: the lock lives as long as it does
        held = False
        try:
            cur = conn.cursor()
            cur.execute("SELECT pg_try_advisory_lock(hashtext('deltaport-hold'), hashtext(%s))", (scope,))
            held = bool(cur.fetchone()[0])
            yield held
        finally:
            # Unlocked before the close: a closed connection's server session ends (and frees its
            # locks) a moment later, and the next sync of the source, started at once, found the
            # lock still held (a fresh-clone test run, 2026-11-28). A dead connection frees it anyway.
            if held:
                _quietly(lambda: cur.execute(
                    "SELECT pg_advisory_unlock(hashtext('deltaport-hold'), hashtext(%s))", (scope,)))
            _quietly(conn.close)

    def _pg_connect(self):
        import psycopg2  # only PostgreSQL deployments need the driver loaded

        kwargs = {"connect_timeout": 10, "application_name": "deltaport"}
        if self.password_env:
            if self.password_env not in os.environ:
                raise StateStoreError(f"state store {self.where}: environment variable {self.password_env} "
                                      "(its password) is not set")
            kwargs["password"] = os.environ[self.password_env]
        deadline = time.monotonic() + _PG_RECONNECT_SECONDS
        while True:
            try:
                conn = psycopg2.connect(self.url, **kwargs)
                break
            except psycopg2.Error as exc:
                # A server restarting or failing over refuses for a few seconds: wait for it. A
                # refusal that waiting cannot cure (a password, a database missing) fails at once.
                if _connection_lost(exc) and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise StateStoreError(f"cannot connect to the state store {self.where}: {_first_line(exc)}") from None
        conn.autocommit = True
        return conn

    def _drop(self, conn) -> None:
        _quietly(conn.close)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    # --- schema ---------------------------------------------------------------------------
    def migrate(self, component: str, migrations: Sequence[str]) -> int:
        """Bring `component` to version len(migrations): migration i (scripts of `;`-separated
        statements) runs once, in order, in the transaction that records it. Returns the version."""
        known = len(migrations)
        if component in self._migrated:
            return known
        # Under one lock for every component: PostgreSQL's CREATE TABLE IF NOT EXISTS is not
        # safe against a concurrent one (two processes starting at once).
        with self.transaction("schema") as db:
            db.execute(_VERSIONS)
            row = db.execute("SELECT version FROM state_schema WHERE component = ?", (component,)).fetchone()
            version = 0 if row is None else row[0]
            if version > known:
                raise StateStoreError(f"the {component} tables in {self.where} are at schema version {version}; "
                                      f"this deltaport knows up to {known}: upgrade deltaport")
            for script in migrations[version:]:
                for statement in _statements(script):
                    db.execute(self.ddl(statement))
            if version < known:
                db.execute("INSERT INTO state_schema VALUES (?, ?, CURRENT_TIMESTAMP) ON CONFLICT (component) "
                           "DO UPDATE SET version = excluded.version, migrated_at = excluded.migrated_at",
                           (component, known))
        self._migrated.add(component)
        return known

    def ddl(self, statement: str) -> str:
        """A statement's column types for this engine (PostgreSQL: INTEGER -> BIGINT, BLOB -> BYTEA)."""
        if self.dialect == SQLITE:
            return statement
        return re.sub(r"\bBLOB\b", "BYTEA", re.sub(r"\bINTEGER\b", "BIGINT", statement))


class StoreTables:
    """Base of a component whose tables live in a state store (the delta index, the ledger, the
    sync cursors): takes a store (or a SQLite path) and brings its tables to `MIGRATIONS`."""

    COMPONENT: str = ""
    MIGRATIONS: Sequence[str] = ()

    def __init__(self, store: StateStore | str | Path):
        self.store = store if isinstance(store, StateStore) else StateStore(store)
        self.store.migrate(self.COMPONENT, self.MIGRATIONS)

    @property
    def where(self) -> str:
        return self.store.where

    def _connect(self):
        return self.store.connect()


_STORES: dict[tuple[str, str | None], StateStore] = {}
_STORES_LOCK = threading.Lock()


def state_store(url: str | Path, password_env: str | None = None) -> StateStore:
    """The process's one handle on a store (its connections and migration check are kept)."""
    key = (str(url), password_env)
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = StateStore(url, password_env=password_env)
        return _STORES[key]


class Connection:
    """One engine's connection behind the calls the stores use, with `?` placeholders."""

    def __init__(self, raw, dialect: str):
        self.raw, self.dialect = raw, dialect

    def execute(self, sql: str, params: Sequence = ()):
        if self.dialect == SQLITE:
            return self.raw.execute(sql, params)
        cur = self.raw.cursor()
        cur.execute(_pg_sql(sql), tuple(_pg_value(v) for v in params))
        return _Cursor(cur)

    def executemany(self, sql: str, rows: Sequence[Sequence]) -> None:
        if self.dialect == SQLITE:
            self.raw.executemany(sql, rows)
        elif rows:
            from psycopg2.extras import execute_batch

            execute_batch(self.raw.cursor(), _pg_sql(sql), [tuple(_pg_value(v) for v in r) for r in rows],
                          page_size=500)


class _Cursor:
    """A psycopg2 cursor that iterates, fetches and counts like sqlite3's, bytes as bytes."""

    def __init__(self, cur):
        self._cur = cur
        self.rowcount = cur.rowcount

    def fetchone(self):
        row = self._cur.fetchone() if self._cur.description else None
        return None if row is None else _row(row)

    def fetchall(self) -> list[tuple]:
        return [_row(r) for r in self._cur.fetchall()] if self._cur.description else []

    def __iter__(self):
        return iter(self.fetchall())


def _row(row: tuple) -> tuple:
    # bytea comes as memoryview, sum() of BIGINT as numeric: give what sqlite3 gives.
    return tuple(bytes(v) if isinstance(v, memoryview) else int(v) if isinstance(v, Decimal) else v for v in row)


def _pg_sql(sql: str) -> str:
    # `?` never appears in the platform's SQL but as a placeholder; a literal % must be doubled.
    return sql.replace("%", "%%").replace("?", "%s")


def _pg_value(v):
    if isinstance(v, (bytes, bytearray)):
        import psycopg2

        return psycopg2.Binary(bytes(v))
    return v


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


# How long opening a PostgreSQL connection waits for a server that refuses because it is down,
# starting or shutting down (a restart takes seconds; a managed failover up to about half a minute).
_PG_RECONNECT_SECONDS = 30.0

# libpq's words for a connection that could not be made or was cut, as opposed to one refused for
# good (authentication, a missing database) or a statement's own error.
_LOST = ("server closed the connection", "terminating connection", "connection refused",
         "the database system is", "could not receive data", "could not send data", "connection reset",
         "timeout expired", "connection already closed", "no connection to the server", "ssl syscall error",
         "eof detected")


def _connection_lost(exc: BaseException) -> bool:
    """Whether `exc` is psycopg2's report of a connection cut or not (yet) possible."""
    import psycopg2

    if not isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return False
    text = str(exc).lower()
    return any(word in text for word in _LOST)


_IDLE_CHECK_SECONDS = 1.0


def _ended_by_server(conn) -> bool:
    """Whether the server ended a kept, idle connection: an idle session has nothing to read, one
    the server terminated has its goodbye and the end of the stream waiting. No round trip; a
    false alarm costs only a new connection."""
    import select

    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _quietly(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - cleanup after a failure must not hide the failure
        pass


def _wal(db: sqlite3.Connection, where: str) -> None:
    """Put the file in WAL mode (a no-op once it is). Turning a new, empty file to WAL needs it to
    itself, and SQLite answers "database is locked" at once on that path instead of waiting as the
    connection's timeout says (two processes creating one store at once: a sensor and a `sync`).
    So wait here, as for any other lock."""
    deadline = time.monotonic() + _SQLITE_WAIT_SECONDS
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise StateStoreError(f"state store {where}: still locked by another process after "
                                      f"{_SQLITE_WAIT_SECONDS:.0f} s ({exc})") from exc
            time.sleep(0.005)
