"""Landing landed deltas again: `deltaport rerun SOURCE N[-M]`, for a delta retired from Dagster
by the partition window (platform_assets/retirement.py) as for any other.

What flows through: a source and a span of deltas it has landed. Their partitions are put back
in `<source>_deltas` where the window removed them, then the source's delta job runs the span in
ranges of at most `sensor.max_deltas_per_run`, in process, on the Dagster instance, as `sync`
runs its requests (`platform_assets.sync._execute`): the runs, materializations and checks show
in the UI afterwards.

Guarantees: the same tables as before (re-running N replaces N's increment rows; the snapshot
applies no delta twice), so a re-run is idempotent. It never races a delta run: it holds the
source's `sync` lock, and refuses while a run of the source is queued or running. Deltas not
landed yet are refused (`sync` lands those, in order). The partitions it puts back stay until
the next retirement pass of a run that lands new deltas.
"""

from __future__ import annotations

import dagster as dg

from platform_assets.config import PlatformConfig
from platform_assets.definitions import build_definitions
from platform_assets.lag import landed_through
from platform_assets.deltas.partitions import delta_partitions, partition_key
from platform_assets.deltas.requests import range_request, ranges, run_in_flight
from platform_assets.sync import DeltaOutcome, _execute, render
from resources.errors import DeltaportError
from resources.state.cursors import SyncCursors
from resources.state.delta_marks import DeltaMarks
from resources.state.store import state_store


class RerunError(DeltaportError):
    """A re-run that cannot start: an unknown source, deltas not landed, the source busy."""


def parse_span(text: str) -> tuple[int, int]:
    """"7" -> (7, 7); "3-7" -> (3, 7)."""
    first, _, last = text.partition("-")
    try:
        span = int(first), int(last or first)
    except ValueError:
        raise RerunError(f"deltas must be N or N-M (e.g. 7 or 3-7), got {text!r}") from None
    if span[0] < 0 or span[1] < span[0]:
        raise RerunError(f"deltas must be N or N-M with 0 <= N <= M, got {text!r}")
    return span


def rerun(cfg: PlatformConfig, instance: dg.DagsterInstance, source: str, first: int, last: int, *,
          echo=print) -> list[DeltaOutcome]:
    """Land `source`'s deltas first..last again (module docstring); an outcome per run, stopping
    at the first that fails."""
    if source not in cfg.source_names:
        raise RerunError(f"unknown source {source!r}; the config's sources: {', '.join(cfg.source_names)}")
    store = state_store(cfg.state_url("index"), cfg.state_password_env)
    landed = landed_through(DeltaMarks(store), instance, source)
    if landed is None or last > landed:
        said = "nothing landed yet" if landed is None else f"landed through delta {landed}"
        raise RerunError(f"{source}: delta {last} has not landed yet ({said}): `deltaport sync` lands it")
    defs = build_definitions(cfg)
    job = defs.resolve_job_def(f"{source}_delta_job")
    with SyncCursors(store).hold(source) as held:
        if not held:
            raise RerunError(f"{source}: a `deltaport sync` is landing this source; re-run once it is done")
        busy = run_in_flight(instance, source)
        if busy is not None:
            raise RerunError(f"{source}: run {busy.run_id[:8]} ({busy.status.value}) has not ended; re-run once it has")
        name = delta_partitions(source).name
        back = [partition_key(n) for n in range(first, last + 1)
                if not instance.has_dynamic_partition(name, partition_key(n))]
        if back:  # retired by the window: put back, for the run and the UI
            instance.add_dynamic_partitions(name, back)
            echo(f"{source}: partitions of {len(back)} retired delta(s) put back")
        out = []
        for a, b in ranges(list(range(first, last + 1)), cfg.sensor.max_deltas_per_run):
            outcome = _execute(instance, job, source, range_request(source, a, b))
            out.append(outcome)
            echo(render(outcome))
            if not outcome.success:
                break
        return out
