"""The Qlik Replicate shape of the width bench (bench/width_bench.py `--format qlik`): a stream of
`width` tables T000.. of one schema (the emulator's CUSTOMERS columns), whose first delta loads
every table (Replicate's full load) and whose later deltas change the first `changed` tables only.

The messages are the emulator's own (resources/emulator/qlik.py: metadata, REFRESH rows, then
one transaction per changed table and delta), with no duplicates, so the truth is each table's
rows as the emulator's source holds them after the delta.
"""

from __future__ import annotations

import datetime as dt

from resources.emulator.outgoing import Outgoing
from resources.emulator.qlik import _CUSTOMERS, QlikConfig, _Table, _Task
from resources.lake.stream_changelog import lake_table


class _WideTask(_Task):
    """The emulator's Qlik task over tables of the CUSTOMERS shape, each with its own ids."""

    def new_row(self, t: _Table, when):
        row = {"ID": t.next_id}
        t.next_id += 1
        row.update({c.name: self.value(t, c.name, when) for c in t.columns if c.name != "ID"})
        return row


class QlikStream:
    """One Qlik source of `width` tables: each delta's messages, and the truth after it."""

    def __init__(self, name: str, width: int, *, changed: int):
        self.name, self.width, self.changed = name, width, changed
        self.task = _WideTask(QlikConfig(seed=width, duplicate_rate=0.0, uncaptured_rate=0.0,
                                         ddl_at_transaction=None, rollback_at_transaction=None))
        self.task.tables = {f"T{i:03d}": _Table(f"T{i:03d}", _CUSTOMERS) for i in range(width)}
        self.names = sorted(self.task.tables)
        self.tables = [lake_table(self.task.cfg.schema, t) for t in self.names]

    def delta(self, n: int, *, initial: int, rows: int) -> list[Outgoing]:
        """Delta n's messages: every table's metadata and `initial` full-load rows at n = 0, else
        `rows` inserts, half as many updates and a quarter as many deletes in each changed table."""
        task, start = self.task, len(self.task.out)
        if n == 0:
            task.cfg = QlikConfig(**{**vars(task.cfg), "refresh_rows": initial})
            for t in task.tables.values():
                task.metadata(t)
            task.refresh()
            return task.out[start:]
        for name in self.names[:self.changed]:
            t = task.tables[name]
            task.clock = task.clock.replace(microsecond=0) + dt.timedelta(seconds=1)
            ops = [task.update(t, task.clock) for _ in range(rows // 2)]
            ops += [task.delete(t) for _ in range(rows // 4)]
            ops += [task.insert(t, task.clock) for _ in range(rows)]
            self._commit(ops)
        return task.out[start:]

    def _commit(self, ops) -> None:
        """The ops as one source transaction (the emulator's `transaction`, with our ops)."""
        task = self.task
        txn_id = f"{task.rng.getrandbits(128):032X}"
        for i, op in enumerate(ops, start=1):
            task.change_number += 1
            seq = f"{task.clock:%Y%m%d%H%M%S}{task.clock.microsecond // 10_000:02d}{task.change_number:019d}"
            task.emit(op, seq, task.clock, txn_id, i, i == len(ops))

    def expected(self, table: str) -> set[int]:
        """The ids of `table`'s (a lake table's) rows now."""
        return {k[0] for k in self.task.tables[self.names[self.tables.index(table)]].rows}
