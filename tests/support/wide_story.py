"""A wide datamart whose deltas touch few of its tables (issue 57's acceptance story), with its
truth after every delta, as the messages a Prostore writer publishes.

`width` tables t000.. (id, name, amount). Delta 0 loads `initial` rows into every table; delta n
>= 1 changes t000 and t(n) (inserts, updates, deletes), so most tables stay untouched for many
deltas. DDL: before `ddl_at`, the last table is dropped, a new table `tnew` is created (its first
rows come a delta later) and t001 gets a column `note` with no row of t001 in that delta (a
DDL-only change: its commit must still carry the column). Each delta's changelog holds the whole
DDL, as BACKUP_TO_KAFKA writes it.
"""

from __future__ import annotations


from resources.codecs.backup import ChangelogRecord
from resources.codecs.backup_writer import TableChanges
from resources.codecs.ddl import replay_changelog
from resources.emulator.outgoing import Outgoing
from tests.support.delta_messages import closed_delta_messages

NEW = "tnew"


class WideStory:
    def __init__(self, name: str, width: int, *, deltas: int, ddl_at: int, initial: int = 4, rows: int = 4):
        self.name, self.width, self.deltas, self.ddl_at = name, width, deltas, ddl_at
        self.initial, self.rows = initial, rows
        self.tables = [f"t{i:03d}" for i in range(width)]
        self.dropped = self.tables[-1]
        self.changelog = [self._record(f"CREATE TABLE {name}.{t} (id BIGINT NOT NULL, name VARCHAR(100), "
                                       f"amount BIGINT, PRIMARY KEY (id)) DISTRIBUTED BY (id)")
                          for t in self.tables]
        self.state: dict[str, dict[int, dict]] = {t: {} for t in self.tables}
        # truth[n] = {table: rows sorted by id} of every live table after delta n
        self.truth: dict[int, dict[str, list[dict]]] = {}
        self.changed: dict[int, set[str]] = {}
        self.next_key = 1
        self.cn = 0

    def _record(self, query: str) -> ChangelogRecord:
        return ChangelogRecord(len(getattr(self, "changelog", [])) + 1, self.name, query)

    def _ddl(self, query: str) -> None:
        self.changelog.append(ChangelogRecord(len(self.changelog) + 1, self.name, query))

    def live(self) -> list[str]:
        return sorted(replay_changelog(self.changelog))

    def _row(self, table: str, key: int, n: int) -> dict:
        row = {"id": key, "name": f"{table} row {key} v{n}", "amount": key * 7 + n}
        if "note" in self.columns(table):
            row["note"] = f"n{n}"
        return row

    def columns(self, table: str) -> list[str]:
        return [c.name for c in replay_changelog(self.changelog)[table].columns]

    def _touched(self, n: int) -> list[str]:
        if n == 0:
            return list(self.tables)
        out = ["t000", f"t{n:03d}"]
        if n == self.ddl_at + 1:
            out.append(NEW)
        return [t for t in out if t in self.live()]

    def delta(self, n: int) -> list[Outgoing]:
        """Delta n's signal events and increment; the truth after it is recorded."""
        if n == self.ddl_at:
            self._ddl(f"DROP TABLE {self.name}.{self.dropped}")
            self._ddl(f"CREATE TABLE {self.name}.{NEW} (id BIGINT NOT NULL, name VARCHAR(100), amount BIGINT, "
                      f"PRIMARY KEY (id)) DISTRIBUTED BY (id)")
            self._ddl(f"ALTER TABLE {self.name}.t001 ADD COLUMN note VARCHAR(20)")
            self.state.pop(self.dropped)
            self.state[NEW] = {}
            for row in self.state["t001"].values():
                row["note"] = None
        changes: dict[str, list[dict]] = {}
        for t in self._touched(n):
            state, out = self.state[t], []
            alive = sorted(state)
            updated, deleted = alive[: self.rows // 2], alive[self.rows // 2: self.rows // 2 + self.rows // 4]
            for k in updated:
                state[k] = self._row(t, k, n)
                out.append({**state[k], "sys_op": 0})
            for k in deleted:
                out.append({**state.pop(k), "sys_op": 1})
            count = self.initial if n == 0 else self.rows
            for k in range(self.next_key, self.next_key + count):
                state[k] = self._row(t, k, n)
                out.append({**state[k], "sys_op": 0})
            self.next_key += count
            changes[t] = out
        self.changed[n] = set(changes)
        self.truth[n] = {t: [dict(self.state[t][k]) for k in sorted(self.state[t])] for t in self.live()}
        return self._messages(n, changes)

    def _messages(self, n: int, changes: dict[str, list[dict]]) -> list[Outgoing]:
        entities = replay_changelog(self.changelog)
        tables = {t: TableChanges(entities[t].columns, out) for t, out in changes.items()}
        msgs = closed_delta_messages(self.name, n, self.changelog, tables, first_write=self.cn + 1)
        self.cn += len(tables)
        return msgs
