"""What a lake on object storage costs against one on local disk (issue 40, item 7): the same
traffic landed through `sync` in one process, on one warm Spark Connect server, in (a) the local
default lake (a Hadoop catalog in a folder) and (b) Iceberg's REST catalog server over moto's S3
server, both on loopback (resources/demo_objstore).

The traffic is bench/dagster_bench.py's: an emulated datamart's `--deltas` steady deltas, each
landed by its own `sync` once its close and backup are in Kafka, then a backlog of `--backlog`
deltas landed by one `sync`. Each lake has its own topics, state and Dagster instance; the two
`sync`s of a steady delta alternate which goes first, so a busy machine weighs on both alike.

Measured, per steady delta and for the backlog, on each lake: seconds (and the ratio S3 / local);
on S3, the requests every S3 client made (Spark's S3FileIO: data files, manifests, manifest
lists; the REST catalog server's: table metadata files) by method (PUT, GET, HEAD, LIST, DELETE,
POST), counted by tests/support/fault_proxy.py with its faults off; on both, the files the
delta added, by kind (data, delete, metadata json, manifest list, manifest, other: the Hadoop
catalog's version hints and checksums) and the tables that got a new metadata file without a new
data or delete file (a commit that changed no rows: a tag, an empty or a metadata-only commit).
Every landed delta is compared with the emulator's truth on both lakes.

    python bench/objstore_bench.py [--deltas 6] [--rows 200] [--backlog 3]

Results: bench-results/objstore.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.dagster_bench import DM, bench_scenario, check, delta_batches  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from bench.history_bench import add_side_by_side_args  # noqa: E402
from platform_assets.config import parse_config  # noqa: E402
from platform_assets.definitions import resources_for  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.emulator.outgoing import BACKUP, SIGNAL  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402
from resources.demo_objstore.rest_catalog import RestCatalogServer  # noqa: E402
from resources.demo_objstore.s3_server import S3Server  # noqa: E402
from tests.support.objstore import (  # noqa: E402
    CREDENTIAL_ENV, SECRET_ENV, new_secret, rest_lake, s3_client, s3_properties)

OPERATIONS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "POST")
KINDS = ("data", "delete", "metadata_json", "manifest_list", "manifest", "other")


def file_kind(key: str) -> str:
    """What an Iceberg file is, from its path."""
    name = key.rsplit("/", 1)[-1]
    if name.endswith(".crc") or name == "version-hint.text":
        return "other"  # the Hadoop catalog's and its local file system's own (none on S3)
    if "/data/" in key:
        return "delete" if "delete" in name else ("data" if name.endswith(".parquet") else "other")
    if name.endswith(".metadata.json"):
        return "metadata_json"
    if name.startswith("snap-") and name.endswith(".avro"):
        return "manifest_list"
    if name.endswith(".avro"):
        return "manifest"
    return "other"


def table_of(key: str) -> str:
    """`<namespace>.<table>` of a file under a table's location (…/<ns>/<table>/data|metadata/…)."""
    for part in ("/data/", "/metadata/"):
        if part in key:
            return ".".join(key.split(part, 1)[0].rstrip("/").split("/")[-2:])
    return "?"


def added(before: dict[str, int], after: dict[str, int]) -> dict:
    """The files `after` has that `before` had not: counts and bytes by kind, per table, and the
    tables that got a new metadata file and no new data or delete file."""
    new = {k: size for k, size in after.items() if k not in before}
    kinds, size, by_table = Counter(), Counter(), {}
    for key, n in new.items():
        kind, table = file_kind(key), table_of(key)
        kinds[kind] += 1
        size[kind] += n
        by_table.setdefault(table, Counter())[kind] += 1
    no_rows = sorted(t for t, c in by_table.items() if c["metadata_json"] and not c["data"] + c["delete"])
    return {"files": {k: kinds[k] for k in KINDS}, "bytes": {k: size[k] for k in KINDS}, "total": len(new),
            "by_table": {t: dict(c) for t, c in sorted(by_table.items())},
            "tables_committed": sum(1 for c in by_table.values() if c["metadata_json"]),
            "tables_committed_without_new_rows": no_rows,
            "files_of_tables_without_new_rows": sum(sum(by_table[t].values()) for t in no_rows),
            "removed": len([k for k in before if k not in after])}


def requests_by_kind(requests) -> dict[str, dict[str, int]]:
    """{operation: {file kind: requests}} of the proxy's `requests` (a LIST or a bucket's own: "other")."""
    out: dict[str, Counter] = {}
    for _, op, target, _ in requests:
        out.setdefault(op, Counter())[file_kind(target.split("?", 1)[0])] += 1
    return {op: dict(c) for op, c in sorted(out.items())}


class Lake:
    """One of the two lakes: its config, topics, Dagster instance, Spark session and file listing."""

    def __init__(self, name: str, lake: dict, bootstrap: str, remote: str, work: Path, listing):
        self.name, self.listing = name, listing
        self.topics = {SIGNAL: f"objbench.{name}.signal.{os.getpid()}", BACKUP: f"objbench.{name}.backup.{os.getpid()}"}
        create_topic(bootstrap, self.topics[SIGNAL])
        create_topic(bootstrap, self.topics[BACKUP], partitions=3)
        self.cfg = parse_config({"datamarts": [{"name": DM, "signal_topic": self.topics[SIGNAL],
                                                "backup_topic": self.topics[BACKUP]}],
                                 "kafka": {"bootstrap_servers": bootstrap}, "spark": {"remote": remote},
                                 "lake": lake, "state_dir": str(work / name / "state")})
        (work / name / "dagster").mkdir(parents=True)
        (work / name / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.instance = dg.DagsterInstance.from_config(str(work / name / "dagster"))
        self.spark = resources_for(self.cfg)["spark"].get_session()
        self.layout = LakeLayout(self.cfg.lake.catalog)

    def land(self, messages, bootstrap: str, proxy: FaultProxy | None) -> dict:
        """Publish `messages` and land them with one `sync`: its seconds, the deltas landed, the
        requests `proxy` counted meanwhile (None: not on the store), the files added."""
        publish(messages, bootstrap, self.topics)
        files, first = self.listing(), len(proxy.requests) if proxy else 0
        began = time.perf_counter()
        out = sync(self.cfg, self.instance, echo=lambda line: None)
        seconds = time.perf_counter() - began
        sent = proxy.requests[first:] if proxy else []
        requests = Counter(op for _, op, _, _ in sent)
        return {"seconds": round(seconds, 2), "landed": [n for _, n in out.landed()], "ok": out.ok,
                "runs": len(out.outcomes), "requests": {op: requests[op] for op in OPERATIONS} if proxy else None,
                "requests_by_kind": requests_by_kind(sent) if proxy else None, **added(files, self.listing())}


def local_listing(warehouse: Path):
    def listing() -> dict[str, int]:
        return {str(p.relative_to(warehouse)): p.stat().st_size for p in warehouse.rglob("*") if p.is_file()}
    return listing


def store_listing(store: S3Server, bucket: str):
    def listing() -> dict[str, int]:  # asked of the store itself, not through the counting proxy
        out: dict[str, int] = {}
        for page in s3_client(store).get_paginator("list_objects_v2").paginate(Bucket=bucket):
            out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
        return out
    return listing


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-objstore-bench-"))
    sc = bench_scenario(args)
    batches = delta_batches(sc.messages)
    res: dict = {"config": vars(args), "steady": [], "backlog": {}}
    # The secret and the catalog's credential, named in the lake block as {env: NAME}, as the tests do.
    os.environ.setdefault(SECRET_ENV, new_secret())
    os.environ.setdefault(CREDENTIAL_ENV, f"deltaport:{new_secret()}")
    try:
        with ExitStack() as stack:
            bootstrap = stack.enter_context(kafka_bootstrap())
            engine = stack.enter_context(bench_engine(work))
            store = stack.enter_context(S3Server(work / "s3"))
            proxy = stack.enter_context(FaultProxy(store.endpoint))  # counts; never armed here
            bucket = store.make_bucket("objbench")
            catalog = stack.enter_context(RestCatalogServer(
                work / "rest", warehouse=f"{bucket}/warehouse",
                properties={**s3_properties(proxy.endpoint, os.environ[SECRET_ENV]), **store.client_properties}))
            print(f"engine ready in {engine.start_seconds:.1f} s; REST catalog {catalog.uri}, "
                  f"S3 {store.endpoint} behind the counting proxy {proxy.endpoint}", flush=True)
            local = Lake("local", {"catalog": "lake", "type": "hadoop", "warehouse": str(work / "lake")},
                         bootstrap, engine.url, work, local_listing(work / "lake"))
            s3 = Lake("s3", rest_lake(catalog, proxy.endpoint, "s3lake"), bootstrap, engine.url, work,
                      store_listing(store, bucket.removeprefix("s3://")))
            steady, backlog = batches[:args.deltas], batches[args.deltas:]
            for i, (n, msgs) in enumerate(steady):
                entry = {"delta": n}
                for lake in ((local, s3) if i % 2 == 0 else (s3, local)):
                    got = lake.land(msgs, bootstrap, proxy if lake is s3 else None)
                    got["equal"] = got["landed"] == [n] and check(lake.spark, lake.layout, sc, n)
                    entry[lake.name] = got
                    print(f"delta {n} on {lake.name}: {got['seconds']:.2f} s, {got['total']} files added "
                          f"{_nonzero(got['files'])}" + (f", requests {_nonzero(got['requests'])}" if got["requests"]
                                                          else "") + f", equal {got['equal']}", flush=True)
                res["steady"].append(entry)
            if backlog:
                msgs = [m for _, ms in backlog for m in ms]
                want = [n for n, _ in backlog]
                for lake in (local, s3):
                    got = lake.land(msgs, bootstrap, proxy if lake is s3 else None)
                    got["equal"] = got["landed"] == want and all(check(lake.spark, lake.layout, sc, n) for n in want)
                    res["backlog"][lake.name] = got
                    print(f"backlog of {len(want)} on {lake.name}: {got['seconds']:.2f} s in {got['runs']} run(s), "
                          f"{got['total']} files added" + (f", requests {_nonzero(got['requests'])}"
                                                           if got["requests"] else "") + f", equal {got['equal']}",
                          flush=True)
            for lake in (local, s3):
                lake.instance.dispose()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["summary"] = summary(res)
    return res


def _nonzero(counts: dict) -> dict:
    return {k: v for k, v in counts.items() if v}


def _median(values) -> float | None:
    values = list(values)
    return round(statistics.median(values), 2) if values else None


def summary(res: dict) -> dict:
    """Medians over the warm steady deltas (the first one creates the tables), the backlog, ratios."""
    warm = res["steady"][1:] or res["steady"]
    out: dict = {"warm_steady_deltas": len(warm)}
    for name in ("local", "s3"):
        out[name] = {
            "seconds_per_steady_delta": _median(e[name]["seconds"] for e in warm),
            "backlog_seconds": res["backlog"].get(name, {}).get("seconds"),
            "backlog_seconds_per_delta": (round(res["backlog"][name]["seconds"] / len(res["backlog"][name]["landed"]),
                                                2) if res["backlog"].get(name, {}).get("landed") else None),
            "files_per_steady_delta": {k: _median(e[name]["files"][k] for e in warm) for k in KINDS},
            "files_total_per_steady_delta": _median(e[name]["total"] for e in warm),
            "tables_committed_per_steady_delta": _median(e[name]["tables_committed"] for e in warm),
            "tables_committed_without_new_rows_per_steady_delta": _median(
                len(e[name]["tables_committed_without_new_rows"]) for e in warm),
            "files_of_tables_without_new_rows_per_steady_delta": _median(
                e[name]["files_of_tables_without_new_rows"] for e in warm),
        }
    out["s3"]["requests_per_steady_delta"] = {op: _median(e["s3"]["requests"][op] for e in warm) for op in OPERATIONS}
    out["s3"]["puts_and_gets_per_steady_delta_by_kind"] = {
        op: {k: _median(e["s3"]["requests_by_kind"].get(op, {}).get(k, 0) for e in warm) for k in KINDS}
        for op in ("PUT", "GET")}
    if res["backlog"].get("s3"):
        out["s3"]["backlog_requests_per_delta"] = {
            op: round(res["backlog"]["s3"]["requests"][op] / len(res["backlog"]["s3"]["landed"]), 1)
            for op in OPERATIONS}
    ratio = lambda key: (round(out["s3"][key] / out["local"][key], 2)  # noqa: E731
                         if out["s3"][key] and out["local"][key] else None)
    out["ratio_s3_to_local"] = {"steady_delta": ratio("seconds_per_steady_delta"), "backlog": ratio("backlog_seconds")}
    out["all_equal"] = all(e[n]["equal"] for e in res["steady"] for n in ("local", "s3")) and all(
        b["equal"] for b in res["backlog"].values())
    return out


def print_table(sm: dict) -> None:
    local, s3 = sm["local"], sm["s3"]
    rows = [("seconds per steady delta (median, warm)", local["seconds_per_steady_delta"],
             s3["seconds_per_steady_delta"], sm["ratio_s3_to_local"]["steady_delta"]),
            ("backlog seconds", local["backlog_seconds"], s3["backlog_seconds"], sm["ratio_s3_to_local"]["backlog"]),
            ("backlog seconds per delta", local["backlog_seconds_per_delta"], s3["backlog_seconds_per_delta"], None),
            ("files added per steady delta", local["files_total_per_steady_delta"],
             s3["files_total_per_steady_delta"], None)]
    rows += [(f"  {k}", local["files_per_steady_delta"][k], s3["files_per_steady_delta"][k], None) for k in KINDS]
    rows += [("tables committed per steady delta", local["tables_committed_per_steady_delta"],
              s3["tables_committed_per_steady_delta"], None),
             ("  of them with no new data/delete file", local["tables_committed_without_new_rows_per_steady_delta"],
              s3["tables_committed_without_new_rows_per_steady_delta"], None),
             ("  the files those wrote", local["files_of_tables_without_new_rows_per_steady_delta"],
              s3["files_of_tables_without_new_rows_per_steady_delta"], None)]
    rows += [(f"S3 {op} per steady delta", None, s3["requests_per_steady_delta"][op], None) for op in OPERATIONS]
    gets = s3["puts_and_gets_per_steady_delta_by_kind"]["GET"]
    rows += [(f"  GET of {k}", None, v, None) for k, v in gets.items() if v]
    print(f"\n{'':44} {'local':>8} {'S3+REST':>8} {'S3/local':>8}")
    for label, a, b, r in rows:
        print(f"{label:44} {'-' if a is None else a:>8} {'-' if b is None else b:>8} {'' if r is None else f'{r}x':>8}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_side_by_side_args(ap, seed=11, out="objstore.json")
    ap.set_defaults(backlog=3, rows=200)  # small: what is counted here is requests and files, not rows
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    res = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print_table(res["summary"])
    print(f"wrote {args.out}")
    return 0 if res["summary"]["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
