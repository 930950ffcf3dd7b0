"""Faults in figures (issue 11), kills: `deltaport sync` SIGKILLed at a chosen point of a run, then
the next `sync` converges, with nothing lost, duplicated or applied twice.

A Prostore story (one datamart, a few deltas, a DDL change) is published once to the real
broker. Each case then lands it in a lake and a Dagster instance of its own: a first
`deltaport sync` runs with ``DELTAPORT_FAILPOINTS`` set (resources/failpoints.py) and dies by
SIGKILL at the point, in the middle of a range run (every delta in one run); a second `sync`
with no failpoint must land everything. The run the kill interrupted stays STARTED in the
instance, as a dead worker's run does.

Checked per case (a row of the report):
- the first sync died at the point (not an ordinary failure, not a pass that never got there);
- the second one succeeded; its wall time is the time to recover;
- every snapshot table as of every delta equals the emulator's truth row for row: rows lost
  (in the truth, not in the lake) and rows duplicated (in the lake beyond the truth);
- every increment table holds each delta's changes once: its rows per delta equal the
  emulator's changes (extra rows: landed twice; missing rows: lost);
- deltas applied twice: a snapshot table whose current history holds two commits of one delta;
- every delta that changed a table recorded on it by its ``delta_<N>`` tag or inside a fold (a
  delta commits only to the tables it changes: `deltaport read --as-of-delta N` resolves the
  others through the source's landed mark, resources/lake/as_of.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DM = "marketing"

# case -> the failpoint spec of its first sync. Each is reached inside a range run of 4 deltas.
KILLS: dict[str, str] = {
    "kill-increment-between-tables": "increment.table_committed@1",
    "kill-increment-before-manifest": "increment.before_manifest",
    "kill-after-history-before-merge": "history.written@2",
    "kill-inside-snapshot-merge": "snapshot.merge@3~150",
    "kill-snapshot-commit-before-tag": "snapshot.committed@2",
    "kill-snapshot-between-tables": "snapshot.table_done@1",
    "kill-between-range-deltas": "snapshot.delta_done@1",
    # After every snapshot commit of the run, before the lake's own landed mark moves (issue 57).
    "kill-before-landed-mark": "lake.landed_mark",
    # Table maintenance after the range (lake.maintenance below: due after every run, compacting
    # from 1 delete file): killed while Spark compacts a snapshot table, and between two tables.
    "kill-inside-compaction": "maintenance.compact~300",
    "kill-between-maintained-tables": "maintenance.table_done@3",
    # ... and while it compacts a history table (history_layout.compact: spans of deltas).
    "kill-inside-history-compaction": "maintenance.compact_history~300",
}
# The kill cases of maintenance run with it due on every range of the story and eager to compact.
MAINTENANCE_CASES = {"every_deltas": 1, "delete_files_threshold": 1, "data_files_threshold": 1, "expire_after_seconds": 0}


@dataclass
class KillRow:
    case: str
    injected: str  # the failpoint spec
    killed: bool = False  # the first sync died by SIGKILL
    recovered: bool = False  # the second sync succeeded
    rows_lost: int = 0
    rows_duplicated: int = 0
    increment_rows_extra: int = 0
    increment_rows_missing: int = 0
    deltas_applied_twice: int = 0
    untagged_deltas: int = 0
    left_by_kill: dict = field(default_factory=dict)  # what the killed sync had committed
    deltas: int = 0
    recover_seconds: float = 0.0
    survived: bool = False
    problems: list = field(default_factory=list)

    def judge(self) -> None:
        self.survived = (self.killed and self.recovered and not self.problems and self.rows_lost == 0
                         and self.rows_duplicated == 0 and self.increment_rows_extra == 0
                         and self.increment_rows_missing == 0 and self.deltas_applied_twice == 0
                         and self.untagged_deltas == 0)


@dataclass
class KillStory:
    scenario: object
    topics: dict


def publish_story(bootstrap: str, seed: int, *, deltas: int = 4, client_config: dict | None = None,
                  prefix: str = "kills") -> KillStory:
    """The story every kill case lands, on topics of its own (`prefix`.signal/backup.<tag>);
    `client_config`: a secured broker's client settings."""
    import uuid

    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish

    sc = build_scenario(EmulatorConfig(seed=seed, deltas=deltas, datamarts=(DM,), chunk_size=8, backup_partitions=2,
                                       cancel_rate=0.0, ddl_at_delta=2, faults=Faults()))
    tag = uuid.uuid4().hex[:8]
    topics = {SIGNAL: f"{prefix}.signal.{tag}", BACKUP: f"{prefix}.backup.{tag}"}
    create_topic(bootstrap, topics[SIGNAL], client_config=client_config)
    create_topic(bootstrap, topics[BACKUP], partitions=2, client_config=client_config)
    publish(sc.messages, bootstrap, topics, producer_config=client_config)
    return KillStory(sc, topics)


def case_folder(work: Path, case: str, bootstrap: str, story: KillStory,
                remote: str | None = None, kafka_properties: dict | None = None, *,
                sensor: dict | None = None, maintenance: dict | None = None) -> tuple[Path, str, dict]:
    """A case's working folder with its deltaport.yaml (a lake and state of its own; the engine at
    `remote`, or the embedded one started on demand), its catalog name, and the environment its
    `sync` runs with: as a user runs it, the config names the engine and the instance is
    ./.dagster of the folder. `sensor`, `maintenance`: settings of the case over the kills' own."""
    from resources.emulator.outgoing import BACKUP, SIGNAL

    folder = work / case
    folder.mkdir(parents=True)
    catalog = case.replace("-", "_")
    (folder / "deltaport.yaml").write_text(yaml.safe_dump({
        "datamarts": [{"name": DM, "signal_topic": story.topics[SIGNAL], "backup_topic": story.topics[BACKUP]}],
        "kafka": {"bootstrap_servers": bootstrap, **({"properties": kafka_properties} if kafka_properties else {})},
        **({"spark": {"remote": remote}} if remote else {}),
        "lake": {"catalog": catalog, "warehouse": str(folder / "lake"),
                 **({"maintenance": MAINTENANCE_CASES} if KILLS.get(case, "").startswith("maintenance.") else {}),
                 **({"maintenance": maintenance} if maintenance else {})},
        "state_dir": str(folder / "state"),
        "sensor": {"max_messages_per_tick": 5000, "max_deltas_per_run": 10, **(sensor or {})},  # one range run
    }))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "DELTAPORT_FAILPOINTS", "DAGSTER_HOME")}
    return folder, catalog, env


def _sync(folder: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "platform_assets.cli", "sync", "-c", str(folder / "deltaport.yaml")],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def run_kill_case(bootstrap: str, remote: str, story: KillStory, case: str, spec: str, work: Path,
                  *, timeout: float = 600) -> KillRow:
    row = KillRow(case, spec)
    folder, catalog, env = case_folder(work, case, bootstrap, story, remote)
    first = _sync(folder, {**env, "DELTAPORT_FAILPOINTS": spec}, timeout)
    row.killed = first.returncode == -9
    if not row.killed:
        row.problems.append(f"the first sync did not die at {spec} (exit {first.returncode}): "
                            f"{(first.stdout + first.stderr)[-1500:]}")
    row.left_by_kill = committed_so_far(remote, catalog, folder / "lake", story.scenario)
    began = time.perf_counter()
    second = _sync(folder, env, timeout)
    row.recover_seconds = round(time.perf_counter() - began, 2)
    row.recovered = second.returncode == 0
    if not row.recovered:
        row.problems.append(f"the recovering sync failed (exit {second.returncode}): "
                            f"{(second.stdout + second.stderr)[-1500:]}")
    compare_with_truth(row, remote, catalog, folder / "lake", story.scenario)
    row.judge()
    return row


def committed_so_far(remote: str, catalog: str, warehouse: Path, sc) -> dict:
    """What a killed sync left: increment deltas per table, manifest deltas, snapshot commits and
    tags per table (shows where in the run the kill landed)."""
    from resources.lake.layout import LakeLayout
    from resources.lake.prostore import landed_deltas
    from resources.spark.iceberg import DELTA_PROPERTY, _quote, table_exists
    from resources.spark.iceberg_reads import delta_tags
    from resources.spark.session import CatalogConfig, connect

    spark = connect(remote, CatalogConfig(name=catalog, warehouse=str(warehouse)))
    layout = LakeLayout(catalog)
    out: dict = {"manifest_deltas": sorted(landed_deltas(spark, layout, DM))}
    for table in sorted(sc.databases[DM].tables):
        inc, snap = layout.increment(DM, table), layout.snapshot(DM, table)
        if table_exists(spark, inc):
            out[f"increment/{table}"] = sorted(r[0] for r in spark.table(inc).select("delta_num").distinct().collect())
        if table_exists(spark, snap):
            commits = spark.sql(f"SELECT count(*) FROM {_quote(snap)}.`snapshots` "
                                f"WHERE summary['{DELTA_PROPERTY}'] IS NOT NULL").collect()[0][0]
            out[f"snapshot/{table}"] = {"commits": int(commits), "tags": sorted(delta_tags(spark, snap))}
    return out


def compare_with_truth(row: KillRow, remote: str, catalog: str, warehouse: Path, sc, *, dm: str = DM,
                       deltas: list[int] | None = None) -> None:
    """Add `dm`'s differences from the truth to `row`: snapshot tables as of each of `deltas`
    (default: every delta), increment rows per delta, deltas applied twice, deltas untagged."""
    from resources.lake.layout import LakeLayout
    from resources.lake.read import rows_as_of
    from resources.spark.iceberg import DELTA_PROPERTY, _quote, table_exists
    from resources.spark.iceberg_reads import delta_tags, folded_commits
    from resources.spark.session import CatalogConfig, connect

    spark = connect(remote, CatalogConfig(name=catalog, warehouse=str(warehouse)))
    layout = LakeLayout(catalog)
    truth = sc.truth[dm]
    row.deltas += len(truth)
    for n in sorted(truth) if deltas is None else deltas:
        for table, state in truth[n].items():
            try:
                got = rows_as_of(spark, layout, dm, table, n)
            except Exception as exc:  # noqa: BLE001 - an unreadable delta is a finding, reported
                row.problems.append(f"{table} as of delta {n}: {type(exc).__name__}: {str(exc)[:300]}")
                got = []
            extra = list(got)  # rows compare with == as in the tests (Decimal 1.0 == 1.00)
            for want in state.values():
                if want in extra:
                    extra.remove(want)
                else:
                    row.rows_lost += 1
            row.rows_duplicated += len(extra)
    for table in sorted(sc.databases[dm].tables):
        inc = layout.increment(dm, table)
        have = ({r["delta_num"]: r["count"] for r in spark.table(inc).groupBy("delta_num").count().collect()}
                if table_exists(spark, inc) else {})
        for n in truth:
            want = sum(1 for c in sc.increments[dm].get(n, []) if c.table == table)
            row.increment_rows_extra += max(0, have.get(n, 0) - want)
            row.increment_rows_missing += max(0, want - have.get(n, 0))
        snap = layout.snapshot(dm, table)
        if not table_exists(spark, snap):
            continue
        quoted = _quote(snap)
        commits = spark.sql(
            f"SELECT s.summary['{DELTA_PROPERTY}'] AS delta, count(*) AS commits FROM {quoted}.`history` h "
            f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
            f"WHERE h.is_current_ancestor AND s.summary['{DELTA_PROPERTY}'] IS NOT NULL GROUP BY 1").collect()
        row.deltas_applied_twice += sum(1 for r in commits if r["commits"] > 1)
        # Recorded: tagged, or inside a commit that folded a range (read from its parent + increments).
        # A delta commits only to the tables it changes (issue 57): only those must be recorded.
        recorded = set(delta_tags(spark, snap)) | {n for c in folded_commits(spark, snap) for n in c.deltas}
        row.untagged_deltas += sum(1 for n in truth if n in changed_by(sc, dm, table) and n not in recorded)


def changed_by(sc, dm: str, table: str) -> set[int]:
    """The deltas that changed `table` of `dm`: those with rows of it, and the one it was born in
    (its first delta in the truth: an empty commit records it). A DDL change with no row is left
    out (it is recorded too, but the count need not look for it)."""
    deltas = sorted(sc.truth[dm])
    born = next((n for n in deltas if table in sc.truth[dm][n]), None)
    return {n for n in deltas if any(c.table == table for c in sc.increments[dm].get(n, []))} | (
        {born} if born is not None else set())


def print_row(row: KillRow) -> None:
    print(f"{row.case:<34} {row.injected:<30} killed {row.killed!s:<5} recovered in {row.recover_seconds:>6.1f} s, "
          f"rows lost {row.rows_lost}, duplicated {row.rows_duplicated}, increment rows extra "
          f"{row.increment_rows_extra} missing {row.increment_rows_missing}, deltas applied twice {row.deltas_applied_twice}, untagged "
          f"{row.untagged_deltas}, survived {row.survived}", flush=True)
    print(f"    left by the kill: {row.left_by_kill}", flush=True)
    for p in row.problems:
        print(f"    {p}", flush=True)
