"""Which snapshot tables a datamart's run must read its progress from, and which the state
store's mark answers for (issue 57: the progress read costs O(changed tables), not O(width)).

What flows through: the source's `landed_through` mark (resources/state/delta_marks.py), the
manifest and changelog history read from the mark on, and the tables the run's own increments
and changelogs name. Out comes the set of tables whose last applied delta must be read from
their own commits (`last_applied_deltas`); every other table of the target is at the mark.

Why that is exact: the mark moves to N only once the snapshot of every table of delta N has
committed (`record_landed`), so a table the target has and delta N had, with the same DDL, is
at N or later. It can be later only if a run died after some of its tables' commits and before
the mark: such a table is one that run changed (its rows or DDL, in a delta after the mark, all
of which the manifest or the changelog history records), or one that run left as it was, which
has no commit after the mark (a delta commits only to the tables it changes, issue 57; a lake
written before that has tags of the same rows). So the tables read are every table with rows
or a DDL change in any delta after the mark, landed or in this run (their own commits stay the
truth), and every other one is at the mark: it gets no commit from this run either. "At the
mark" is in the sense that matters: a table's own newest recorded delta may be older (the
deltas since left it alone), and the run takes every table to be at least at the mark
(`prostore_snapshot.at_least`). Without a usable mark (none yet, not the delta before the run,
or a lake whose manifest or changelog does not record it: a lake written before the mark, or
rebuilt) every table is read, and the lake's own mark (`resources/lake/landed_mark.py`), when
the lake has one, stands in for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.lake.prostore import TableStats, data_tables


def tables_to_read(tables: Sequence[str], *, mark: int | None, first: int,
                   landed: Mapping[int, Mapping[str, TableStats]], history: Mapping[int, list],
                   run_changes: Iterable[str], run_schemas: Iterable[Mapping[str, EntitySchema]]) -> set[str] | None:
    """The tables (of `tables`, the target's) whose progress must be read from their own
    commits, or None when the mark cannot stand for the others (module docstring).

    `mark`: the source's `landed_through`; `first`: the run's first delta; `landed`, `history`:
    the manifest and changelog history read from the mark on; `run_changes`: the tables the
    run's increments have rows for; `run_schemas`: the data tables of each of the run's deltas,
    from its changelog."""
    if mark is None or mark != first - 1 or mark not in landed or mark not in history:
        return None
    at_mark = data_tables(replay_changelog(history[mark]))
    read = set(run_changes)
    for n, stats in landed.items():
        if n > mark:  # the manifest names every table of a delta, those it left alone with no rows
            read.update(t for t, s in stats.items() if s.rows or s.upserts or s.deletes)
    later = [data_tables(replay_changelog(records)) for n, records in history.items() if n > mark]
    for schema in [*later, *run_schemas]:
        read.update(name for name, entity in schema.items() if at_mark.get(name) != entity)
    return {t for t in tables if t in read or t not in at_mark}
