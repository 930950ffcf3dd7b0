"""Does a delta cost what it changes, whatever the datamart's width? (issue 57)

Two Prostore datamarts on one lake, one Dagster instance and one warm Spark Connect server: one
of 2 tables and one of `--wide` tables (same columns). Delta 0 loads `--initial` rows into every
table (the first delta: every table created); each later delta changes the same 2 tables only
(`--rows` inserts, half as many updates, a quarter as many deletes each), so both datamarts
land the same change and differ only by the tables it leaves alone. Every delta goes the
platform's real path: its signal events and BACKUP_TO_KAFKA increment published to Kafka, then
one `sync` (the sensor's code, then the delta's run, in process) of that datamart alone.

Per delta and width: `sync`'s seconds, the files the lake gained (data files, and metadata:
`*.metadata.json`, i.e. catalog commits, manifests and manifest lists), the events the Dagster
instance stored (issue 58: a delta's events follow the tables it changes), and with `--sql` the
Spark SQL executions the server ran. The first delta is reported apart (it creates the tables);
the steady figure is the median of the others, and the ratio wide/narrow is the figure of
merit (goal: <= 1.2x seconds, <= 1.1x files). The two widths alternate delta by delta, so a
busy machine weighs on both alike. Every changed table as of the last delta, and an untouched
one, are compared with the bench's own truth (a benchmark of wrong results is void).

With `--format qlik` the two are Qlik Replicate change streams instead (bench/width_qlik.py: the
same change in the same 2 tables, one source per width); the truth compared is each table's keys.

With `--objstore` the lake is on S3 behind Iceberg's REST catalog (bench/objstore_bench.py's
machinery: the demo's in-process S3 store, resources/demo_objstore/, behind
tests/support/fault_proxy.py with its faults off, which counts every S3 request: Spark's
S3FileIO and the REST catalog server's). Per delta and width it then also reports the S3
requests by method (PUT, GET, HEAD, LIST, DELETE, POST) and by file kind, and the objects the
delta wrote under the source's namespaces by kind (listed from the store itself, not through the
proxy); catalog commits are the new `*.metadata.json` (every commit of a table or view writes one).

`--profile DIR` dumps a cProfile of the last `--profiled` deltas' `sync`, their thread pools'
work included (DIR/w<width>_d<n>.prof; read with `python -m pstats`): what a steady delta's
client spends, per function. Those deltas are left out of the steady figures. With `--profile-first` the first delta is
profiled too (`--profiled 0` profiles it alone): where the creation of every table goes.

    python bench/width_bench.py [--format prostore|qlik] [--wide 50] [--deltas 4] [--rows 200]
        [--initial 100] [--sql] [--objstore] [--profile DIR [--profiled 2] [--profile-first]]

Results: bench-results/width[_qlik][_s3].json and lines on stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.engine import bench_engine  # noqa: E402
from bench.results import save_results  # noqa: E402
from bench.sql_log import SqlLog, free_port, ui_conf  # noqa: E402
from platform_assets.config import parse_config  # noqa: E402
from platform_assets.definitions import resources_for  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.codecs.backup import ChangelogRecord  # noqa: E402
from resources.codecs.backup_writer import TableChanges  # noqa: E402
from resources.codecs.ddl import replay_changelog  # noqa: E402
from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.read import rows_as_of  # noqa: E402
from resources.lake.cdc import cdc_rows_as_of  # noqa: E402
from resources.emulator.qlik import QLIK  # noqa: E402
from bench.width_qlik import QlikStream  # noqa: E402
from tests.support.delta_messages import closed_delta_messages  # noqa: E402
from bench.objstore_bench import OPERATIONS, added, requests_by_kind, store_listing  # noqa: E402
from resources.demo_objstore.rest_catalog import RestCatalogServer  # noqa: E402
from resources.demo_objstore.s3_server import S3Server  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402
from tests.support.objstore import CREDENTIAL_ENV, SECRET_ENV, new_secret, rest_lake, s3_properties  # noqa: E402

CHANGED = 2  # tables every steady delta changes, in both datamarts


class Datamart:
    """One datamart of `width` tables t000.. (id, name, amount): its changelog, the truth of
    every table after each delta, and each delta's messages."""

    def __init__(self, name: str, width: int):
        self.name, self.width = name, width
        self.tables = [f"t{i:03d}" for i in range(width)]
        self.changelog = [ChangelogRecord(i + 1, name, f"CREATE TABLE {name}.{t} (id BIGINT NOT NULL, "
                                                        f"name VARCHAR(100), amount BIGINT, PRIMARY KEY (id)) "
                                                        f"DISTRIBUTED BY (id)")
                          for i, t in enumerate(self.tables)]
        self.columns = {t: e.columns for t, e in replay_changelog(self.changelog).items()}
        self.truth: dict[str, dict[int, dict]] = {t: {} for t in self.tables}
        self.next_key = 1
        self.cn = 0

    def _row(self, key: int, version: int) -> dict:
        return {"id": key, "name": f"row {key} v{version}", "amount": key * 7 + version}

    def delta(self, n: int, *, initial: int, rows: int) -> list[Outgoing]:
        """Delta n's signal events and increment: every table loaded at n = 0, else the first
        `CHANGED` tables changed (inserts, updates, deletes of distinct keys)."""
        changes: dict[str, list[dict]] = {}
        for t in (self.tables if n == 0 else self.tables[:CHANGED]):
            state, out = self.truth[t], []
            alive = sorted(state)
            updated, deleted = alive[:rows // 2], alive[rows // 2:rows // 2 + rows // 4]
            for k in updated:
                state[k] = self._row(k, n)
                out.append({**state[k], "sys_op": 0})
            for k in deleted:
                out.append({**state.pop(k), "sys_op": 1})
            for k in range(self.next_key, self.next_key + (initial if n == 0 else rows)):
                state[k] = self._row(k, n)
                out.append({**state[k], "sys_op": 0})
            self.next_key += initial if n == 0 else rows
            changes[t] = out
        tables = {t: TableChanges(self.columns[t], out) for t, out in changes.items()}
        msgs = closed_delta_messages(self.name, n, self.changelog, tables, first_write=self.cn + 1)
        self.cn += len(tables)
        return msgs

    def expected(self, table: str) -> list[dict]:
        return [self.truth[table][k] for k in sorted(self.truth[table])]


class ThreadProfiles:
    """cProfile of a block and of the work its thread pools run meanwhile (the step's jobs run in
    `ThreadPoolExecutor`s, which a cProfile of the calling thread does not see): one profile per
    work item, merged with the block's into one file. Times add up across threads (a wait in one
    thread and the work it waits for both count): compare function by function, not totals."""

    def __init__(self):
        self.main, self.items = cProfile.Profile(), []

    def __enter__(self):
        from concurrent.futures import thread

        self._run = run = thread._WorkItem.run
        items = self.items

        def profiled(item):
            prof = cProfile.Profile()
            items.append(prof)
            prof.enable()
            try:
                return run(item)
            finally:
                prof.disable()

        thread._WorkItem.run = profiled
        self.main.enable()
        return self

    def __exit__(self, *exc):
        from concurrent.futures import thread

        self.main.disable()
        thread._WorkItem.run = self._run
        return False

    def dump(self, path: Path) -> None:
        stats = pstats.Stats(self.main)
        for prof in self.items:
            try:
                stats.add(prof)
            except TypeError:  # a work item that ran no Python call: nothing to add
                pass
        stats.dump_stats(path)


def lake_files(lake: Path, namespace: str) -> dict[str, int]:
    """{kind: files} under the datamart's namespaces of the lake folder (Hadoop catalog)."""
    counts = {"data": 0, "metadata_json": 0, "manifests": 0, "other": 0}
    for root, _, files in os.walk(lake):
        if f"{os.sep}{namespace}" not in root:
            continue
        for f in files:
            if f.endswith(".crc") or f == "version-hint.text":
                continue
            kind = ("data" if f.endswith(".parquet") else "metadata_json" if f.endswith(".metadata.json")
                    else "manifests" if f.endswith(".avro") else "other")
            counts[kind] += 1
    return counts


class ObjectStoreLake:
    """The lake on S3 behind the REST catalog, every S3 request counted by the proxy."""

    def __init__(self, stack: ExitStack, work: Path):
        # The secret and the catalog's credential, named in the lake block as {env: NAME}, as the tests do.
        os.environ.setdefault(SECRET_ENV, new_secret())
        os.environ.setdefault(CREDENTIAL_ENV, f"deltaport:{new_secret()}")
        store = stack.enter_context(S3Server(work / "s3"))
        self.proxy = stack.enter_context(FaultProxy(store.endpoint))  # counts; never armed here
        bucket = store.make_bucket("widthbench")
        catalog = stack.enter_context(RestCatalogServer(
            work / "rest", warehouse=f"{bucket}/warehouse",
            properties={**s3_properties(self.proxy.endpoint, os.environ[SECRET_ENV]), **store.client_properties}))
        self.lake = rest_lake(catalog, self.proxy.endpoint, "s3lake")
        self.listing = store_listing(store, bucket.removeprefix("s3://"))

    def objects(self, source: str) -> dict[str, int]:
        """{key: bytes} of the objects under `source`'s namespaces (<src>, <src>_meta, ...)."""
        return {k: n for k, n in self.listing().items() if f"/{source}/" in f"/{k}" or f"/{source}_" in f"/{k}"}

    def measure(self, source: str, land) -> dict:
        """Run `land()` and say what it did on the store: requests by method and by file kind, objects added."""
        before, first = self.objects(source), len(self.proxy.requests)
        land()
        sent = self.proxy.requests[first:]
        ops = Counter(op for _, op, _, _ in sent)
        new = added(before, self.objects(source))
        # Which namespace's tables were loaded (a load GETs the table's metadata.json): tells a
        # load of every snapshot table from one of every increment or history table.
        loads = Counter(target.split("?", 1)[0].split("/metadata/")[0].rsplit("/", 2)[-2]
                        for _, op, target, _ in sent if op == "GET" and ".metadata.json" in target)
        return {"files": new["files"], "requests": {op: ops[op] for op in OPERATIONS},
                "requests_by_kind": requests_by_kind(sent), "tables_committed": new["tables_committed"],
                "by_table": new["by_table"], "metadata_gets_by_namespace": dict(sorted(loads.items()))}


def event_rows(home: Path) -> int:
    """The events the Dagster instance at `home` has stored (its SQLite event logs: each run's own
    and the asset index, which keeps the asset events again): what a delta adds to the instance."""
    import sqlite3

    total = 0
    logs = home / "history" / "runs"  # Dagster's default SQLite layout: <run id>.db and index.db
    for db in sorted(logs.glob("*.db")) if logs.is_dir() else ():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_logs'").fetchone():
                total += conn.execute("SELECT count(*) FROM event_logs").fetchone()[0]
        conn.close()
    return total


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-width-bench-"))
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    (work / "dagster").mkdir()
    qlik = args.format == "qlik"
    marts = {w: (QlikStream(f"qwidth{w}", w, changed=CHANGED) if qlik else Datamart(f"width{w}", w))
             for w in (CHANGED, args.wide)}
    res: dict = {"config": vars(args) | {"out": str(args.out), "profile": str(args.profile or "")}, "deltas": {w: [] for w in marts}}
    ui_port = free_port() if args.sql else None
    try:
        with ExitStack() as stack:
            bootstrap = stack.enter_context(kafka_bootstrap())
            engine = stack.enter_context(bench_engine(work, conf=ui_conf(ui_port) if ui_port else None))
            s3 = ObjectStoreLake(stack, work) if args.objstore else None
            lake = s3.lake if s3 else {"catalog": "lake", "warehouse": str(work / "lake")}
            sql = SqlLog(ui_port) if ui_port else None
            cfgs, topics = {}, {}
            for w, dm in marts.items():
                topics[w] = ({QLIK: f"width.qlik.{dm.name}.{os.getpid()}"} if qlik else
                             {SIGNAL: f"width.signal.{dm.name}.{os.getpid()}",
                              BACKUP: f"width.backup.{dm.name}.{os.getpid()}"})
                for t in topics[w].values():
                    create_topic(bootstrap, t)
                # idle_seconds 0: each sync seals what is published (one delta), as the bench publishes it
                source = ({"sources": [{"name": dm.name, "format": QLIK, "topic": topics[w][QLIK], "idle_seconds": 0,
                                        "max_rows": 10**9, "max_seconds": 10**6}]} if qlik else
                          {"datamarts": [{"name": dm.name, "signal_topic": topics[w][SIGNAL],
                                          "backup_topic": topics[w][BACKUP]}]})
                cfgs[w] = parse_config({**source, "sensor": {"max_messages_per_tick": 10**6},  # a delta per sync
                                        "kafka": {"bootstrap_servers": bootstrap},
                                        "spark": {"remote": engine.url},
                                        "lake": lake, "state_dir": str(work / "state")})
            layout = LakeLayout(cfgs[CHANGED].lake.catalog)
            with dg.DagsterInstance.get() as instance:
                for n in range(args.deltas):
                    for w, dm in marts.items():
                        publish(dm.delta(n, initial=args.initial, rows=args.rows), bootstrap, topics[w])
                        if sql:
                            sql.mark()
                        done: dict = {}
                        events_before = event_rows(work / "dagster")
                        profiling = bool(args.profile) and (n >= args.deltas - args.profiled
                                                            or (args.profile_first and n == 0))

                        def land() -> None:
                            profiled = ThreadProfiles() if profiling else nullcontext()
                            t0 = time.perf_counter()
                            with profiled:
                                done["out"] = sync(cfgs[w], instance, echo=lambda line: None)
                            done["seconds"] = time.perf_counter() - t0
                            if profiling:
                                profiled.dump(args.profile / f"w{w}_d{n}.prof")

                        if s3:
                            store = s3.measure(dm.name, land)
                        else:
                            before = lake_files(work / "lake", dm.name)
                            land()
                            after = lake_files(work / "lake", dm.name)
                            store = {"files": {k: after[k] - before[k] for k in after}}
                        entry = {"delta": n, "seconds": round(done["seconds"], 2),
                                 "landed": [d for _, d in done["out"].landed()], **store, "profiled": profiling,
                                 "events": event_rows(work / "dagster") - events_before}
                        if sql:
                            entry["sql_executions"] = len(sql.since())
                        res["deltas"][w].append(entry)
                        print(f"{dm.name} delta {n}: {entry['seconds']:.2f} s, files {entry['files']}, "
                              f"{entry['events']} Dagster events"
                              + (f", S3 requests {entry['requests']}" if s3 else "")
                              + (f", {entry['sql_executions']} SQL executions" if sql else ""), flush=True)
                spark = resources_for(cfgs[CHANGED])["spark"].get_session()
                last = args.deltas - 1
                res["equal"] = all(
                    (({r.get("ID", r.get("id")) for r in cdc_rows_as_of(spark, layout, dm.name, t, last)} if qlik
                      else rows_as_of(spark, layout, dm.name, t, last)) == dm.expected(t))
                    and res["deltas"][w][-1]["landed"] == [last]  # one delta per sync: numbers are the bench's
                    for w, dm in marts.items() for t in dm.tables[:CHANGED] + dm.tables[-1:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["summary"] = summarize(res["deltas"], args.wide)
    return res


def summarize(deltas: dict[int, list[dict]], wide: int) -> dict:
    def steady(w: int, key) -> float:  # the deltas a profiler slowed are left out
        return statistics.median(key(e) for e in deltas[w][1:] if not e.get("profiled"))

    out: dict = {}
    for w in (CHANGED, wide):
        out[f"first_delta_s_{w}"] = deltas[w][0]["seconds"]
        out[f"steady_s_{w}"] = steady(w, lambda e: e["seconds"])
        out[f"steady_files_{w}"] = steady(w, lambda e: sum(e["files"].values()))
        out[f"steady_commits_{w}"] = steady(w, lambda e: e["files"]["metadata_json"])
        out[f"steady_events_{w}"] = steady(w, lambda e: e["events"])
        if "sql_executions" in deltas[w][0]:
            out[f"steady_sql_executions_{w}"] = steady(w, lambda e: e["sql_executions"])
        if "requests" in deltas[w][0]:  # --objstore: each method apart, then all of them
            for op in (*OPERATIONS, "all"):
                out[f"steady_{op}_{w}"] = steady(w, lambda e: (sum(e["requests"].values()) if op == "all"
                                                                else e["requests"][op]))
            out[f"steady_files_by_kind_{w}"] = {k: steady(w, lambda e: e["files"][k]) for k in deltas[w][0]["files"]}
    whats = ("s", "files", "commits", "events") + ((*OPERATIONS, "all") if "requests" in deltas[wide][0] else ())
    for what in whats:  # none where the narrow source made none (an S3 method neither used)
        narrow = out[f"steady_{what}_{CHANGED}"]
        out[f"steady_{what}_ratio"] = round(out[f"steady_{what}_{wide}"] / narrow, 2) if narrow else None
    out["first_delta_ratio"] = round(out[f"first_delta_s_{wide}"] / out[f"first_delta_s_{CHANGED}"], 2)
    return out


def print_table(sm: dict, wide: int) -> None:
    """The steady medians, narrow and wide side by side (with --objstore: the S3 figures too)."""
    rows = [("seconds", "s"), ("objects/files written", "files"), ("catalog commits (metadata.json)", "commits"),
            ("Dagster events stored", "events")]
    rows += [(f"S3 {op} requests", op) for op in (*OPERATIONS, "all") if f"steady_{op}_{wide}" in sm]
    print(f"\nsteady delta (median) {'2 tables':>20} {f'{wide} tables':>12} {'ratio':>8}")
    for label, key in rows:
        ratio = sm[f"steady_{key}_ratio"]
        print(f"{label:32} {round(sm[f'steady_{key}_{CHANGED}'], 2):>10} {round(sm[f'steady_{key}_{wide}'], 2):>12} "
              f"{'-' if ratio is None else f'{ratio}x':>8}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=("prostore", "qlik"), default="prostore",
                    help="datamarts of Prostore, or Qlik Replicate change streams")
    ap.add_argument("--wide", type=int, default=50, help="tables of the wide datamart (the narrow one has 2)")
    ap.add_argument("--deltas", type=int, default=4, help="deltas per datamart; the first creates the tables")
    ap.add_argument("--rows", type=int, default=200, help="inserts per changed table per steady delta")
    ap.add_argument("--initial", type=int, default=100, help="rows of every table at delta 0")
    ap.add_argument("--sql", action="store_true", help="count the Spark SQL executions of each delta")
    ap.add_argument("--objstore", action="store_true",
                    help="the lake on S3 behind Iceberg's REST catalog; count the S3 requests of each delta")
    ap.add_argument("--profile", type=Path, default=None, help="dump a cProfile of the last deltas' sync here")
    ap.add_argument("--profiled", type=int, default=2,
                    help="with --profile: how many last deltas are profiled (left out of the steady figures)")
    ap.add_argument("--profile-first", action="store_true",
                    help="with --profile: profile the first delta too (DIR/w<width>_d0.prof: where table "
                         "creation goes); its seconds then carry the profiler's cost")
    ap.add_argument("--out", type=Path, default=None, help="default: bench-results/width[_qlik][_s3].json")
    args = ap.parse_args(argv)
    if args.out is None:
        name = "width" + ("_qlik" if args.format == "qlik" else "") + ("_s3" if args.objstore else "")
        args.out = ROOT / "bench-results" / f"{name}.json"
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.profile and not args.profile_first and args.deltas - args.profiled < 2:
        ap.error("--profile needs at least 2 deltas before the profiled ones (the first creates the tables)")
    if args.deltas < 2:
        ap.error("--deltas must be at least 2 (the first one creates the tables)")
    logging.basicConfig(level=logging.WARNING)
    sm = save_results(res := run(args), args.out)
    print_table(sm, args.wide)
    print(f"steady delta, {args.wide} tables against 2: {sm['steady_s_ratio']}x seconds, "
          f"{sm['steady_files_ratio']}x files, {sm['steady_commits_ratio']}x commits; first delta "
          f"{sm['first_delta_ratio']}x; equal {res['equal']}")
    print(f"wrote {args.out}")
    return 0 if res["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
