"""Two marks per source in the state store: the last delta whose snapshot landed, and the last
delta retired from Dagster (platform_assets/retirement.py).

What flows through: a source name and delta numbers. The snapshot's step writes `landed` as soon
as the snapshot of a run's deltas has committed; the retirement pass writes `retired` once the
partitions up to it are gone from the Dagster instance. The lag, the sensor's resume without a
cursor and the retirement read them here instead of listing every partition or materialization
Dagster holds (which grows with the lake's age: issue 43).

Guarantees: each mark only moves forward (`max`), in one statement, so a re-run of an old delta
never lowers `landed`, and two writers cannot move a mark back; a mark not written yet is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from resources.state.store import StateStore, StoreTables

_MIGRATIONS = ("""CREATE TABLE IF NOT EXISTS delta_marks (
  source TEXT PRIMARY KEY, landed_through INTEGER, retired_through INTEGER, updated_at TEXT NOT NULL)""",)


@dataclass(frozen=True)
class Marks:
    landed_through: int | None = None  # every delta up to this one is in the lake's snapshot tables
    retired_through: int | None = None  # every delta up to this one has no partition in Dagster


class DeltaMarks(StoreTables):
    COMPONENT, MIGRATIONS = "delta_marks", _MIGRATIONS

    def __init__(self, store: StateStore | str | Path):
        super().__init__(store)

    def get(self, source: str) -> Marks:
        with self._connect() as db:
            row = db.execute("SELECT landed_through, retired_through FROM delta_marks WHERE source = ?",
                             (source,)).fetchone()
        return Marks() if row is None else Marks(row[0], row[1])

    def landed(self, source: str, delta: int) -> None:
        self._forward(source, "landed_through", delta)

    def retired(self, source: str, delta: int) -> None:
        self._forward(source, "retired_through", delta)

    def _forward(self, source: str, column: str, delta: int) -> None:
        # `column` is one of the two names above, never user input.
        with self.store.transaction(f"delta_marks:{source}") as db:
            db.execute(f"INSERT INTO delta_marks (source, {column}, updated_at) VALUES (?, ?, CURRENT_TIMESTAMP) "
                       f"ON CONFLICT (source) DO UPDATE SET {column} = CASE WHEN delta_marks.{column} IS NULL "
                       f"OR delta_marks.{column} < excluded.{column} THEN excluded.{column} "
                       f"ELSE delta_marks.{column} END, updated_at = excluded.updated_at", (source, int(delta)))
