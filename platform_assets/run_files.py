"""A retired run's files outside Dagster's databases: deleted with the run, never before it is done.

What flows through: the ids of the finished runs a retirement pass deletes
(platform_assets/retirement.py), and the instance's folders. Besides its rows, Dagster 1.13
keeps per run, and its `delete_run` removes none of them:
- its compute logs, through the instance's compute log manager. The default local manager
  writes `$DAGSTER_HOME/storage/<run_id>/compute_logs/<key>.out|.err|.complete` (a key per step,
  or per process running several); dagster-aws's S3, GCS and Azure managers upload them to
  their bucket and delete the local files, leaving `<run_id>/compute_logs/` folders in their
  local directory;
- on a SQLite instance the run's own event file `history/runs/<run_id>.db` (and its -wal, -shm).
Nothing else per run was found under DAGSTER_HOME (listed after `sync`s; a daemon's run logs
under the same `<run_id>/` prefix, a key per step process; deltaport's assets return no value,
so the filesystem IO manager writes nothing).

Guarantees:
- `remove_run_files` deletes a run's logs through its manager's own `delete_logs(prefix=[run_id])`
  (every manager implements it: the local one removes the run's folder, a bucket's manager its
  objects), and its event file; the caller does it before the run's record goes, so a kill in
  between leaves the record for the next pass, which removes what is left (each removal skips
  what is gone).
- `sweep_orphans` removes what a run left when its record went first: a deployment's runs retired
  before this module, a run deleted from the UI, a kill of such an older pass, a reader that
  opened a deleted run's event file again. Only names that are run ids (UUIDs), only of runs the
  instance does not hold, asked after listing: a run's record is written before any of its
  files, so a run in flight, or one starting during the sweep, is never taken. Bounded: the
  `limit` oldest names of each folder a pass (a window's runs are newer than what it retired).
  A bucket's objects of such runs are not swept: the manager's API cannot list the run ids it
  holds (a lifecycle rule on the bucket's prefix bounds them).
"""

from __future__ import annotations

import os
import shutil
import uuid

import dagster as dg
from dagster._core.storage.cloud_storage_compute_log_manager import CloudStorageComputeLogManager
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager

SHARD_SUFFIXES = ("", "-wal", "-shm")  # a SQLite event file and its journal files


def remove_run_files(instance: dg.DagsterInstance, run_id: str) -> None:
    """Remove run `run_id`'s compute logs and its own event file (SQLite); what is gone already is skipped."""
    instance.compute_log_manager.delete_logs(prefix=[run_id])
    storage = instance.event_log_storage
    if getattr(storage, "is_run_sharded", False) and hasattr(storage, "path_for_shard"):
        path = storage.path_for_shard(run_id)
        for leftover in (path + suffix for suffix in SHARD_SUFFIXES):
            if os.path.exists(leftover):
                os.remove(leftover)
        # The storage remembers the files it opened as having their tables: forgotten, a later
        # read of the deleted run in this process (a `sync` ran it) finds it empty, not broken.
        getattr(storage, "_initialized_dbs", set()).discard(run_id)


def run_file_folders(instance: dg.DagsterInstance) -> list[str]:
    """The local folders holding per-run entries named by run id: the compute logs' (the local
    manager's, or a bucket manager's local copies) and, on SQLite, the event files'."""
    manager = instance.compute_log_manager
    if isinstance(manager, CloudStorageComputeLogManager):
        manager = manager.local_manager
    folders = [manager._base_dir] if isinstance(manager, LocalComputeLogManager) else []  # no public accessor
    storage = instance.event_log_storage
    if getattr(storage, "is_run_sharded", False) and hasattr(storage, "path_for_shard"):
        folders.append(os.path.dirname(storage.path_for_shard("run")))
    return folders


def run_id_of(name: str) -> str | None:
    """The run id an entry `name` is for (`<id>` folder, `<id>.db`, `<id>.db-wal`), or None."""
    for suffix in (".db" + s for s in SHARD_SUFFIXES):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    try:
        return name if str(uuid.UUID(name)) == name else None
    except ValueError:
        return None


def sweep_orphans(instance: dg.DagsterInstance, *, limit: int) -> int:
    """Remove the entries of runs the instance no longer holds among the `limit` oldest run-id
    entries of each folder (`run_file_folders`); how many were removed."""
    removed = 0
    for folder in run_file_folders(instance):
        oldest = _oldest_run_entries(folder, limit)  # listed first, asked after (module docstring)
        held = set(instance.get_run_ids(dg.RunsFilter(run_ids=sorted({run for run, _ in oldest})))) if oldest else set()
        for run_id, path in oldest:
            if run_id not in held:
                _remove(path)
                removed += 1
    return removed


def _oldest_run_entries(folder: str, limit: int) -> list[tuple[str, str]]:
    """[(run id, path)] of the `limit` least recently changed entries of `folder` named by a run id."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    named = []
    for entry in entries:
        if (run_id := run_id_of(entry.name)) is not None:
            try:
                named.append((entry.stat(follow_symlinks=False).st_mtime, run_id, entry.path))
            except FileNotFoundError:  # removed since the listing
                continue
    return [(run_id, path) for _, run_id, path in sorted(named)[:limit]]


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)  # a concurrent sweep may be removing it too
    elif os.path.lexists(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
