"""Work on several lake tables at once, from one client: each table's Spark jobs are small and
mostly wait (planning, commits, metadata), so one table's MERGE overlaps another's read and
key check on the server. What flows through: a function and its calls' arguments; what comes
back: their results in the calls' order. Guarantee: every call has ended before
`side_by_side` returns or raises, so a step never fails while one of its commits is under way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

# Beyond a few tables at once the jobs only queue on the server's cores.
MAX_TABLES_AT_ONCE = 4


def side_by_side(fn: Callable[..., T], calls: Sequence[tuple]) -> list[T]:
    """[fn(*args) for args in calls], run in threads (at most `MAX_TABLES_AT_ONCE`), results in
    the calls' order; the first failure (in call order) is raised once every call has ended."""
    if len(calls) < 2:
        return [fn(*args) for args in calls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(MAX_TABLES_AT_ONCE, len(calls)),
                            thread_name_prefix="deltaport-table") as pool:
        futures = [pool.submit(fn, *args) for args in calls]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]
