"""Which state of a lake table answers "as of delta N" (pure: no engine, no Dagster).

A delta commits only to the tables it changes (issue 57): a table left alone by delta N has no
commit and no `delta_<N>` tag for it. So "table T as of N" is resolved from five facts every
engine reads from metadata (Spark: `resources/spark/iceberg_reads.py`; PyIceberg:
`resources/lake/pyiceberg_history.py`):
- `landed` (L): the source's landed delta, the lake's own mark (`LANDED_PROPERTY` on the source's
  manifest table; a lake written before the mark: the table's newest tag, since every table was
  then tagged every delta). N > L is not landed.
- `recorded` (R): the table's newest delta recorded by a commit or tag (`last_applied_deltas`).
  R > L only while a run is in flight or died between tables: such a commit is never read as of
  any N <= L.
- `tags`: {delta: snapshot id} of the table's `delta_<N>` tags (one per delta that changed it).
- `folds`: the deltas of each folded commit (a range run: one commit, tagged with its last delta).
- `history_from`: the table's `deltaport.history-from` (None: no history kept).

Rules, in this order (docs/how-it-works.md, "Reading a table as of a delta"):
1. N > L (or L unknown): `DeltaNotLandedError`.
2. R is None: no commit records a delta; the table had no rows at N (`Absent`).
3. R <= N: the table as it is (`Current`): no delta after R changed it, and maintenance commits
   keep its rows.
4. the history covers N: the versions current at N, history read up to R (`FromHistory`).
5. N is tagged: that snapshot (`FromTag`): a lake written before this rule reads as before.
6. N is inside a fold whose last delta is above N: `FromFold` (the caller rebuilds the state from
   the state before the fold plus the fold's deltas up to N).
7. else the newest tag M <= N (`FromTag`); none: the table did not exist at N (`Absent`).
Why 7 is exact: every commit of a delta is tagged (a missing tag is repaired before the next
delta), a fold is answered by rule 6, and maintenance drops a tag only where the history
answers (rule 4) or where a newer tag at or below every delta it answered stays
(`tags_to_expire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resources.errors import DeltaportError
from resources.lake.history_forms import AsOfDelta, covers

# On `lake.<source>_meta.manifest`: every delta up to this one has landed in every snapshot table
# of the source (set after a run's snapshot commits, before the state store's mark; forward only).
LANDED_PROPERTY = "deltaport.landed-through"


class DeltaNotLandedError(DeltaportError):
    """The delta asked for is above the source's landed delta."""


@dataclass(frozen=True)
class Current:
    """The table as it is now."""


@dataclass(frozen=True)
class FromHistory:
    """The versions current at N: the snapshot table's and its history's, history up to `recorded`."""
    recorded: int


@dataclass(frozen=True)
class FromTag:
    """The snapshot tagged `delta_<delta>` (delta <= N; the table did not change in between)."""
    delta: int
    snapshot_id: object


@dataclass(frozen=True)
class FromFold:
    """N is inside the folded commit of `deltas` (N < its last): rebuild from the state before it."""
    deltas: tuple[int, ...]


@dataclass(frozen=True)
class Absent:
    """The table had no rows (did not exist) as of N."""


Resolution = Current | FromHistory | FromTag | FromFold | Absent


def source_landed(lake_mark: int | None, recorded: int | None) -> int | None:
    """L: the lake's mark, or for a lake written before it, the table's own newest recorded delta."""
    return lake_mark if lake_mark is not None else recorded


def resolve_as_of(n: int, *, landed: int | None, recorded: int | None, tags: Mapping[int, object],
                  folds: Sequence[Sequence[int]] = (), history_from: int | None = None,
                  name: str = "the table") -> Resolution:
    """Which state answers `name` as of delta `n` (module docstring, rules 1-7)."""
    n = int(n)
    if landed is None or n > landed:
        raise DeltaNotLandedError(f"{name}: delta {n} has not landed "
                                  f"(last landed: {'none' if landed is None else landed})")
    if recorded is None:
        return Absent()
    if recorded <= n:
        return Current()
    if covers(history_from, AsOfDelta(n)):
        return FromHistory(recorded)
    if n in tags:
        return FromTag(n, tags[n])
    inside = [tuple(f) for f in folds if f and n in f and max(f) > n]
    if inside:
        return FromFold(inside[-1])
    below = [m for m in tags if m <= n]
    if not below:
        return Absent()
    m = max(below)
    return FromTag(m, tags[m])


def tags_to_expire(tags: Sequence[int], *, landed: int | None, keep_tags: int,
                   history_from: int | None) -> list[int]:
    """The `delta_<N>` tags maintenance may drop: only those the history answers (n >= its first
    delta - 1, `covers`) and below m*, the newest tag at or below L - keep_tags; so every delta
    still readable by tag keeps the newest tag at or below it, the table's newest tag stays, and
    no tag goes when no history is kept."""
    if history_from is None or landed is None or not tags:
        return []
    floor = [m for m in tags if m <= landed - keep_tags]
    if not floor:
        return []
    newest_kept = max(floor)
    return sorted(m for m in tags if history_from - 1 <= m < newest_kept)
