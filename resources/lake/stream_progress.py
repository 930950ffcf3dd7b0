"""Which of a change stream's snapshot tables a run must read its progress from, and which the
state store's mark answers for (issue 57: the progress read costs O(changed tables), not O(width)).

What flows through: the source's `landed_through` mark (resources/state/delta_marks.py), the
manifest read from the mark on, and the tables the run's own decoded changes name. Out comes
the set of snapshot tables whose last applied delta must be read from their own commits
(`writer_progress`); every other one is at the mark, and the run writes nothing to it.

Why that is exact: the mark moves to N only once every snapshot table's commit of the run that
landed N is done (`platform_assets.retirement.record_landed`), so every table has applied every
delta up to N that changes it: it is at N, in the sense that matters (a delta commits only to
the tables it changes, issue 57: a table's own newest recorded delta may be older), or later.
It can be later only if a run died after some of its tables' commits and before the mark. A
table whose rows a delta after the mark changes (the manifest records it, written after the
increments; the run's own deltas are in its decoded changes, landed or not yet) is read: its
own commits stay the truth. Any other table has no commit after the mark (a dead run wrote
nothing to it either), so "at the mark" is as good as its real last.
Without a usable mark (none yet, not the delta before the run's first, or a manifest that does
not record it: a lake written before the mark, or rebuilt) every table is read, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def stream_tables_to_read(tables: Sequence[str], *, mark: int | None, first: int | None,
                          landed: Mapping[int, Mapping[str, object]], run_changes: Iterable[str]) -> set[str] | None:
    """The tables (of `tables`, the source's snapshot tables) whose progress must be read, or
    None when the mark cannot stand for the others (module docstring).

    `mark`: the source's `landed_through`; `first`: the run's first delta; `landed`: the
    manifest from the mark on ({delta: {table: CdcLandStats}}); `run_changes`: the tables the
    run's decoded changes name."""
    if mark is None or first is None or mark != first - 1 or mark not in landed:
        return None
    read = set(run_changes)
    for n, stats in landed.items():
        if n > mark:  # any row at all, before-images too: reading one table more is never wrong
            read.update(t for t, s in stats.items() if s.rows or s.upserts or s.deletes or s.before_images)
    return {t for t in tables if t in read}
