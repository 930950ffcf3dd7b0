"""One headless pass of the platform, for cron, CI and `deltaport demo --once`.

Per source: evaluate its sensor (a datamart's DELTA_CLOSE sensor, a change stream's sealing
sensor: the same code the daemon runs), add the new partitions, and execute each requested run
in order, in process, on the Dagster instance of DAGSTER_HOME (runs, materializations and
checks show in the UI afterwards): one delta, or a range of up to `sensor.max_deltas_per_run`
when a backlog is due. Repeats while the sensor has work (reading is bounded per tick). A
range run that fails on bad input (`resources.errors.BadInputError`: the same deltas would fail
the same way again) is cut in halves, again and again, so the deltas before the bad one land
and it fails alone, named. A failed run stops its source (later deltas would fail to advance
the snapshot anyway); the cursor is kept at the failed run's first delta. The
sensors' cursors are kept in the state store (`resources.state.cursors`), beside the index, so a
`sync` on another host goes on from them; one `sync` at a time works on a source (another one,
on any host sharing the store, reports the source busy and leaves it).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg

from platform_assets.config import PlatformConfig
from platform_assets.definitions import build_definitions
from platform_assets.deltas.requests import range_request, request_deltas, runs_in_flight
from platform_assets.run_launcher import run_process_alive
from resources.errors import BadInputError, DeltaportError
from resources.state.cursors import SyncCursors
from resources.state.store import state_store


# The runs' event logs stay in the instance (and the UI); the terminal gets one line per delta.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

# Marks a run that a `sync` executed in its own process (the daemon's runs carry dagster/run_key),
# and the host it ran on.
SYNC_RUN_TAG = "deltaport/run_key"
SYNC_HOST_TAG = "deltaport/sync_host"


@dataclass
class DeltaOutcome:
    """One run's outcome: a delta, or a range of them."""

    source: str  # a datamart or a change stream
    deltas: list[int]
    success: bool
    rows: dict[str, int] = field(default_factory=dict)  # increment rows per table
    snapshot_rows: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    bad_input: bool = False  # failed on bad input (resources.errors.BadInputError)
    cut: bool = False  # a failed range run that went again in parts (their outcomes follow)
    landed_assets: list[str] = field(default_factory=list)  # asset keys materialized, e.g. "marketing/snapshot"
    failed_assets: dict[str, str] = field(default_factory=dict)  # asset key -> why it did not land

    @property
    def snapshot_landed(self) -> bool:
        """The deltas are in the lake (the snapshot commits them), whether or not every asset landed."""
        return self.success or f"{self.source}/snapshot" in self.landed_assets


@dataclass
class SyncResult:
    outcomes: list[DeltaOutcome] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # source -> why its next delta waits
    failed: dict[str, str] = field(default_factory=dict)  # source -> why it could not be read

    @property
    def ok(self) -> bool:
        return not self.failed and all(o.success or o.cut for o in self.outcomes)

    def landed(self) -> list[tuple[str, int]]:
        """(source, delta) of every delta landed with all its assets, in order."""
        return [(o.source, n) for o in self.outcomes if o.success for n in o.deltas]

    def snapshots_landed(self) -> list[tuple[str, int]]:
        """(source, delta) of every delta whose snapshot landed, a user asset failing or not."""
        return [(o.source, n) for o in self.outcomes if o.snapshot_landed for n in o.deltas]

    def summary(self) -> str:
        """The pass's last line: deltas landed (in the snapshot), runs, deltas not landed, and the
        assets that failed on landed deltas (what the next pass does about them)."""
        landed = self.snapshots_landed()
        failed = sum(len(o.deltas) for o in self.outcomes if not o.snapshot_landed and not o.cut)
        line = f"sync: {len(landed)} delta(s) landed in {len(self.outcomes)} run(s), {failed} failed"
        partial = [o for o in self.outcomes if o.snapshot_landed and not o.success]
        if partial:
            assets = sorted({a for o in partial for a in o.failed_assets})
            line += (f"; on {sum(len(o.deltas) for o in partial)} of the landed deltas "
                     f"{', '.join(assets) or 'an asset'} failed: the next sync runs those deltas again")
        return line


def _rows(result, key: dg.AssetKey, *, per_delta: bool) -> dict[str, int]:
    """The `rows/<table>` of `key`'s materializations in the run. A range run materializes each
    of its partitions with that delta's own metadata, in no set order: `per_delta` rows (the
    increment's) are summed over them; the others (the snapshot's, on the range's last delta
    only) are the newest partition's that has them."""
    by_partition: dict[int, dict[str, int]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        if mat.asset_key == key:
            rows = {k.split("/", 1)[1]: int(v.value) for k, v in mat.metadata.items() if k.startswith("rows/")}
            if rows:
                by_partition[int(mat.partition) if mat.partition is not None else -1] = rows
    if not per_delta:
        return by_partition[max(by_partition)] if by_partition else {}
    total: dict[str, int] = {}
    for rows in by_partition.values():
        for table, n in rows.items():
            total[table] = total.get(table, 0) + n
    return total


class UnknownSourceError(DeltaportError):
    """`sync --source NAME` of a name the config does not have."""


def sync(cfg: PlatformConfig, instance: dg.DagsterInstance, *, max_ticks: int = 100, echo=print,
         sources: Sequence[str] | None = None) -> SyncResult:
    """One pass over every source of `cfg`, or over `sources` only (names the config has: an
    operator of many sources lands the one that matters now; the others wait for their pass)."""
    unknown = sorted(set(sources or ()) - set(cfg.source_names))
    if unknown:
        raise UnknownSourceError(f"unknown source(s) {', '.join(map(repr, unknown))}; "
                                 f"the config's sources: {', '.join(cfg.source_names)}")
    defs = build_definitions(cfg)
    cursors = SyncCursors(state_store(cfg.state_url("index"), cfg.state_password_env),
                          legacy_file=cfg.resolve_path(cfg.state_dir) / "sync-cursors.json")
    out = SyncResult()
    sensors = [(d.name, f"{d.name}_delta_close_sensor") for d in cfg.datamarts]
    sensors += [(s.name, f"{s.name}_seal_sensor") for s in cfg.streams]
    if sources is not None:
        sensors = [(name, sensor) for name, sensor in sensors if name in sources]
    for name, sensor_name in sensors:
        with cursors.hold(name) as held:
            if not held:
                out.waiting[name] = "another `deltaport sync` is landing this source; left to it"
                echo(f"{name}: {out.waiting[name]}")
                continue
            fail_orphaned_runs(instance, name, echo)
            _sync_source(instance, defs, name, sensor_name, cursors, out, max_ticks, echo,
                         idle_ticks=idle_ticks_to_stop(sensor_name))
    return out


def idle_ticks_to_stop(sensor_name: str) -> int:
    """Ticks in a row with nothing to run and nothing left unread that end a source's pass.

    Each tick reads the source's topics and records its lag (two events in the instance): on
    every `sync`, after every delta. A Prostore tick says how many messages it left unread (its
    cursor's `unread`), so one tick with none has read the topics to their end, and a second
    would read the same end again. A change stream's seal sensor does not say: two ticks."""
    return 1 if sensor_name.endswith("_delta_close_sensor") else 2


def fail_orphaned_runs(instance: dg.DagsterInstance, source: str, echo=print) -> list[str]:
    """Fail the runs of `source` that an earlier `sync` left unended; their ids.

    A `sync` runs in its own process, so one that was killed (or whose host went down) leaves its
    run STARTED for ever: no daemon monitors it. Such a run would hold its source (the sensor
    requests nothing while a run of the source is in flight) and no later sync would land a
    delta. Called with the source's sync lock held, which a living sync on any host holds for
    as long as it works: so every unended sync run of the source is an orphan, whichever host it
    ran on. Its deltas are requested again by the tick that follows (its cursor was never
    saved past them). Runs launched by the daemon are left to the daemon's run monitoring. A run
    of this host whose process still lives is left too: the lock can be lost while its holder
    works (its PostgreSQL connection cut), and failing a live run would land its deltas twice at
    once; this host can tell, another host's process it cannot."""
    failed = []
    for run in runs_in_flight(instance, source):
        if SYNC_RUN_TAG not in run.tags:
            continue
        if run.tags.get(SYNC_HOST_TAG) == socket.gethostname() and run_process_alive(instance, run.run_id)[1]:
            continue
        instance.report_run_failed(run, message="failed by a later `deltaport sync`: the sync that ran it ended "
                                                "without ending it (killed, or its host went down)")
        echo(f"{source}: run {run.run_id[:8]} ({run.status.value}) of an earlier sync that died marked failed; "
             "its deltas are landed again")
        failed.append(run.run_id)
    return failed


def _sync_source(instance: dg.DagsterInstance, defs: dg.Definitions, name: str,
                 sensor_name: str, cursors: SyncCursors, out: SyncResult, max_ticks: int, echo, *,
                 idle_ticks: int = 2) -> None:
    cursor = cursors.get(name)
    sensor = defs.resolve_sensor_def(sensor_name)
    job = defs.resolve_job_def(f"{name}_delta_job")
    idle = 0
    for _ in range(max_ticks):
        try:
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                         resources=defs.resources) as ctx:
                result = sensor(ctx)
        except DeltaportError as exc:  # the tick failed: the source cannot be read; its cursor stays
            out.failed[name] = str(exc)
            echo(f"{name}: FAILED: {exc}")
            return
        for req in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        for event in result.asset_events or []:  # the source's lag, as the daemon records it
            instance.report_runless_asset_event(event)
        if result.skip_reason:
            out.waiting[name] = result.skip_reason.skip_message
        queue = list(result.run_requests)
        while queue:
            outcome = _execute(instance, job, name, queue.pop(0))
            if not outcome.success and outcome.bad_input and len(outcome.deltas) > 1:
                # One bad delta must not hold the good ones before it: the range goes again in
                # two halves, and so on, until the deltas before the bad one have landed and it
                # fails alone (a few runs: twice log2 of the range's length at most).
                outcome.cut = True
                half = outcome.deltas[(len(outcome.deltas) - 1) // 2]
                queue[:0] = [range_request(name, outcome.deltas[0], half),
                             range_request(name, half + 1, outcome.deltas[-1])]
            out.outcomes.append(outcome)
            echo(render(outcome))
            if outcome.success or outcome.cut:
                continue
            if result.cursor is not None:  # what landed stays landed; the next sync starts at the failed delta
                cursors.put(name, json.dumps({**json.loads(result.cursor), "next": outcome.deltas[0]}))
            return
        if result.cursor is not None:  # None: unchanged, as the daemon reads it (e.g. a tick that failed)
            cursor = result.cursor
            cursors.put(name, cursor)
        unread = json.loads(result.cursor or "{}").get("unread", 0)
        idle = 0 if result.run_requests or unread else idle + 1
        if idle >= idle_ticks:  # nothing to run and nothing left unread (`idle_ticks_to_stop`)
            break


def _execute(instance: dg.DagsterInstance, job, source: str, req: dg.RunRequest) -> DeltaOutcome:
    """Run one request in process; its outcome, with the step's error if it failed."""
    tags = {**req.tags, SYNC_RUN_TAG: req.run_key, SYNC_HOST_TAG: socket.gethostname()}
    run = job.execute_in_process(partition_key=req.partition_key, instance=instance, tags=tags,
                                 raise_on_error=False, run_config=QUIET)
    outcome = DeltaOutcome(source, request_deltas(req), run.success,
                           _rows(run, dg.AssetKey([source, "increment"]), per_delta=True),
                           _rows(run, dg.AssetKey([source, "snapshot"]), per_delta=False))
    outcome.landed_assets = sorted({e.asset_key.to_user_string() for e in run.get_asset_materialization_events()})
    if not run.success:
        failures = [e for e in run.all_events if e.is_step_failure]
        failure = failures[0] if failures else None
        outcome.error = step_error(failure) if failure else "run failed"
        outcome.bad_input = failure is not None and bad_input(failure)
        errors = {f.step_key: step_error(f) for f in failures}
        errors.update({e.step_key: "not run: an asset it depends on failed" for e in run.all_events
                       if e.is_step_skipped})
        outcome.failed_assets = failed_assets(job, errors, set(outcome.landed_assets))
    return outcome


def failed_assets(job, step_errors: dict[str, str], landed: set[str]) -> dict[str, str]:
    """{asset key: why it did not land} of a failed run of `job`: each asset of a failed or
    skipped step (`step_errors`, by step key) that did not land, with that step's error."""
    layer = job.asset_layer
    out = {}
    for key in sorted(layer.selected_asset_keys, key=lambda k: k.to_user_string()):
        step = layer.get_op_output_handle(key).node_handle.name
        if step in step_errors and key.to_user_string() not in landed:
            out[key.to_user_string()] = step_errors[step]
    return out


def bad_input(failure) -> bool:
    """Whether a failed step failed on bad input (a `BadInputError` anywhere in its chain of
    causes): the same deltas fail the same way again, unlike an engine or a broker gone."""
    names, todo = set(), [BadInputError]
    while todo:  # every subclass, by the name Dagster keeps of an error's class
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    err = failure.event_specific_data.error
    while err is not None:
        if err.cls_name in names:
            return True
        err = err.cause
    return False


def step_error(failure) -> str:
    """What a failed step says, root cause first: Dagster wraps the asset's own error (the
    Spark server that went away, a missing delta) in "Error occurred while executing op"."""
    err = failure.event_specific_data.error
    while err.cause is not None:
        err = err.cause
    lines = [line.strip() for line in err.message.strip().splitlines()] or [err.cls_name or "error"]
    # A gRPC error (the Spark Connect server) says what happened in its status and details lines.
    said = [line for line in lines[1:] if line.startswith(("status = ", "details = "))]
    return f"{' '.join([lines[0], *said])[:600]} (step {failure.step_key})"


def render(o: DeltaOutcome) -> str:
    which = f"delta {o.deltas[0]}" if len(o.deltas) == 1 else f"deltas {o.deltas[0]}-{o.deltas[-1]}"
    if o.cut:
        return f"{o.source} {which}: FAILED: {o.error}; cut in two, to land the deltas before the bad one"
    detail = tables_detail(o)
    if o.success:
        return f"{o.source} {which}: landed ({detail})"
    if not o.snapshot_landed:
        return f"{o.source} {which}: FAILED: {o.error}"
    # The deltas are in the lake; what did not land with them is named, each with its error.
    own = {f"{o.source}/{name}" for name in SOURCE_ASSETS}
    landed = ", ".join(["snapshot", *(a for a in o.landed_assets if a not in own)])
    failed = "; ".join(f"{a} FAILED: {why}" for a, why in sorted(o.failed_assets.items())) or f"FAILED: {o.error}"
    return f"{o.source} {which}: {landed} landed ({detail}); {failed}; the next sync runs {which} again"


def tables_detail(o: DeltaOutcome) -> str:
    """The tables the run changed, each with its increment's rows and the snapshot's after it,
    then a count of the others: a line grows with what changed, not with the source's width."""
    tables = sorted(set(o.rows) | set(o.snapshot_rows))
    # Without the increment's rows (a run of the snapshot alone), the snapshot's tables are named.
    changed = [t for t in tables if o.rows.get(t)] if o.rows else tables
    said = [f"{t} +{o.rows.get(t, 0)} -> {o.snapshot_rows.get(t, '?')}" for t in changed]
    others = len(tables) - len(changed)
    if others:
        said.append(f"{others} other table{'s' if others > 1 else ''} unchanged")
    return ", ".join(said) or "no table"


# A source's own assets (platform_assets/prostore/assets.py, streams/assets.py): the rest of a
# run's assets are users' (@delta_asset), named in full on the outcome's line.
SOURCE_ASSETS = ("signal_events", "changelog", "increment", "snapshot", "history")
