"""The cursors of `deltaport sync`'s sensor passes, one per source, in the state store: a `sync`
on another host goes on where the last one stopped, instead of evaluating from nothing.

What flows through: a source name and its sensor's cursor (the opaque string Dagster sensors
keep). Guarantees: `put` replaces the source's cursor atomically; `hold` lets one `sync` at a
time work on a source (a second one, on any host, is told the source is busy).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path

from resources.state.store import StateStore, StoreTables

_MIGRATIONS = ("""CREATE TABLE IF NOT EXISTS sync_cursors (
  source TEXT PRIMARY KEY, cursor TEXT, updated_at TEXT NOT NULL)""",)


class SyncCursors(StoreTables):
    COMPONENT, MIGRATIONS = "sync_cursors", _MIGRATIONS

    def __init__(self, store: StateStore | str | Path, legacy_file: Path | None = None):
        super().__init__(store)
        self._legacy = legacy_file

    def get(self, source: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT cursor FROM sync_cursors WHERE source = ?", (source,)).fetchone()
        if row is None and self._legacy is not None and self._legacy.exists():
            # <state_dir>/sync-cursors.json of deltaport before the state store: read, not rewritten
            return json.loads(self._legacy.read_text()).get(source)
        return None if row is None else row[0]

    def put(self, source: str, cursor: str | None) -> None:
        with self.store.transaction(f"sync_cursors:{source}") as db:
            db.execute("INSERT INTO sync_cursors VALUES (?, ?, CURRENT_TIMESTAMP) ON CONFLICT (source) DO UPDATE "
                       "SET cursor = excluded.cursor, updated_at = excluded.updated_at", (source, cursor))

    def hold(self, source: str) -> AbstractContextManager[bool]:
        return self.store.hold(f"sync:{source}")
