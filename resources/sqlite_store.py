"""SQLite connections of the platform's small stores (the delta index, the CDC ledger).

WAL mode, so the sensor and the runs of one Dagster instance on one machine read while one
writes; autocommit (`isolation_level=None`), so transactions are explicit: `transaction` takes
the write lock up front (BEGIN IMMEDIATE) and commits, or rolls back on any exception.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def connect(path: str | Path) -> Iterator[sqlite3.Connection]:
    """An autocommit connection to `path` in WAL mode, closed on exit."""
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        yield db
    finally:
        db.close()


@contextmanager
def transaction(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A connection inside BEGIN IMMEDIATE: committed on exit, rolled back on any exception."""
    with connect(path) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
