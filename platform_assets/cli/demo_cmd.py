"""`deltaport demo`: the platform end to end on embedded defaults.

Starts a real Kafka broker (or uses $KAFKA_BOOTSTRAP_SERVERS), an emulated Prostore closing
deltas over time (duplicates, a re-export and a lagging backup included; malformed messages,
quarantined and named by a WARN check, with `--bad-input`) in two datamarts, `marketing` landed
on its DELTA_CLOSE signals and `sourcedb` backup-only (from its backup increments alone), beside
one Qlik Replicate, one DataWorks and one Datastream source (their changes arrive over the same
time; the platform seals their deltas), and `dagster dev` with the daemon and the
sensors on: the UI at http://127.0.0.1:3000 shows the deltas landing. Ctrl-C stops everything.

`--once`: the same without the UI: emulate, land every delta headless (`deltaport sync`), print
per source, delta and table the lake's row count beside the emulator's truth, exit 0 when every
emulated Prostore delta has landed and every landed delta equals the truth.

`--lake s3`: the lake on object storage behind a REST catalog (moto's S3 server and Iceberg's
REST catalog server on loopback, `platform_assets/cli/demo_lake.py`), stopped with the demo.

Everything lives in .deltaport/demo (config, lake, delta index, Dagster instance), wiped at
each start: a new broker means new topics, and an index of old topics must not be reused.
Spark is one Spark Connect server shared by every run: $SPARK_REMOTE, else the embedded one
(`deltaport spark`), reused if running, else started for the demo and stopped after it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import yaml

from platform_assets.cli.common import state_dir
from platform_assets.cli.demo_lake import LAKES, demo_lake
from platform_assets.cli.demo_streams import DemoStream, compare, demo_streams
from platform_assets.cli.spark_cmd import engine_for_demo
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.broker import kafka_bootstrap
from resources.spark.server import LocalSparkServer

TOPICS = {SIGNAL: "prostore.signal", BACKUP: "prostore.backup"}
# Faults the platform recovers from by itself (a lost chunk never re-exported would block a delta).
# Malformed messages only with --bad-input: the platform quarantines them and lands the deltas from
# their good copies, but its check then warns, and a first run of a healthy platform shows green.
DEMO_FAULTS = Faults(duplicate_rate=0.05, reexport_deltas=(2,), lost_chunk_deltas=(2,), lagging_deltas=(3,), lag=2)


def demo_faults(bad_input: bool) -> Faults:
    """The demo's faults; `bad_input`: also one malformed message of each kind in each topic."""
    return replace(DEMO_FAULTS, malformed=bad_input)


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the platform end to end on embedded defaults", description=__doc__)
    p.add_argument("--once", action="store_true", help="no UI: land every delta headless, compare, exit")
    p.add_argument("--deltas", type=int, default=8, help="closed deltas per datamart")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--pace", type=float, default=10.0, help="seconds between two DELTA_CLOSEs (UI mode)")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--bad-input", action="store_true",
                   help="also send malformed messages (corrupt copies, bad keys): quarantined, named by a WARN check")
    p.add_argument("--lake", choices=LAKES, default="local",
                   help="local: a Hadoop catalog in the demo folder; s3: S3 + a REST catalog, on loopback")
    p.set_defaults(run=run)


def _workspace(bootstrap: str, streams: list[DemoStream], idle_seconds: float, lake: dict) -> dict[str, Path]:
    root = (state_dir() / "demo").resolve()
    # An embedded server a `deltaport read --config` of the last demo started in its folder goes
    # with the folder (else it would run on with its state file deleted).
    LocalSparkServer(root / "state", {}).stop()
    shutil.rmtree(root, ignore_errors=True)
    paths = {"root": root, "config": root / "deltaport.yaml", "dagster_home": root / "dagster",
             "workspace": root / "workspace.yaml"}
    paths["dagster_home"].mkdir(parents=True)
    project_yaml = Path(__file__).resolve().parents[2] / "dagster.yaml"
    if project_yaml.exists():
        shutil.copy(project_yaml, paths["dagster_home"] / "dagster.yaml")
    paths["config"].write_text(yaml.safe_dump({
        # marketing is signal-driven; sourcedb is backup-only (its deltas land once complete in the
        # backup topic, in order; the signal topic's events of sourcedb are not read).
        "sources": [{"name": "marketing", "format": "prostore", "signal_topic": TOPICS[SIGNAL],
                     "backup_topic": TOPICS[BACKUP]},
                    {"name": "sourcedb", "format": "prostore", "backup_topic": TOPICS[BACKUP]},
                    *(s.config(idle_seconds) for s in streams)],
        # No spark.remote: the demo's runs get its server from $SPARK_REMOTE, and a `deltaport read
        # --config` of this file after the demo (whose server may be stopped by then) starts the
        # embedded one of this folder instead of calling a server that is gone.
        "kafka": {"bootstrap_servers": bootstrap},
        "lake": lake,
        "sensor": {"interval_seconds": 5, "max_messages_per_tick": 5000},
        "state_dir": "state",
        # A user asset downstream of marketing's snapshots: lineage topic -> delta -> snapshot -> mart.
        "code": ["platform_assets.examples.marketing_marts"],
    }, sort_keys=False))
    paths["workspace"].write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "platform_assets.definitions", "location_name": "deltaport"}}]}))
    return paths


def run(args) -> int:
    started = time.monotonic()
    print("starting the embedded Kafka broker ...", flush=True)
    with kafka_bootstrap() as bootstrap, engine_for_demo() as spark_remote, demo_lake(args.lake) as lake:
        print(f"broker at {bootstrap} ({time.monotonic() - started:.1f} s)", flush=True)
        streams = demo_streams(args.seed, args.deltas)
        # --once: a quiet stream's last changes are sealed at once; with the UI after 10 s of quiet.
        paths = _workspace(bootstrap, streams, 0 if args.once else 10, lake)
        os.environ["SPARK_REMOTE"] = spark_remote  # this process's runs and dagster dev's
        os.environ["DELTAPORT_CONFIG"] = str(paths["config"])
        os.environ["DAGSTER_HOME"] = str(paths["dagster_home"])
        sc = build_scenario(EmulatorConfig(seed=args.seed, deltas=args.deltas, streams=2, chunk_size=5,
                                           backup_partitions=3, faults=demo_faults(args.bad_input)))
        create_topic(bootstrap, TOPICS[SIGNAL])
        create_topic(bootstrap, TOPICS[BACKUP], partitions=3)
        for s in streams:
            create_topic(bootstrap, s.topic)
        if args.once:
            return _once(sc, streams, bootstrap, paths, started)
        return _with_ui(sc, streams, bootstrap, paths, args)


def _once(sc, streams: list[DemoStream], bootstrap: str, paths: dict[str, Path], started: float) -> int:
    import dagster as dg

    from platform_assets.config import load_config
    from platform_assets.definitions import ledger_resource, resources_for
    from platform_assets.sync import sync
    from resources.lake.history_read import read_mark
    from resources.lake.layout import LakeLayout
    from resources.lake.read import rows_as_of
    from resources.lake.side_by_side import side_by_side

    publish(sc.messages, bootstrap, TOPICS)
    print(f"emulated {len(sc.messages)} messages: deltas 0..{sc.config.deltas - 1} of "
          f"{', '.join(sc.config.datamarts)}, faults: {', '.join(sorted(sc.injected))}", flush=True)
    for s in streams:
        publish(s.story.messages, bootstrap, {s.format: s.topic})
        print(f"emulated {len(s.story.messages)} {s.format} messages on {s.topic} (source {s.name}): "
              f"{', '.join(sorted(s.story.injected))}", flush=True)
    cfg = load_config(paths["config"])
    with dg.DagsterInstance.get() as instance:
        result = sync(cfg, instance)
    spark = resources_for(cfg)["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    landed = set(result.landed())
    print(f"\n{'datamart':10} {'delta':>5} {'table':14} {'lake rows':>9} {'truth rows':>10}  equal")
    all_equal = True
    wanted = [(dm, n, table, rows) for dm, deltas in sc.truth.items() for n, state in sorted(deltas.items())
              for table, rows in sorted(state.items())]
    # Read side by side: each read is a few small Spark queries that mostly wait on the server.
    # Each datamart's landed delta (its lake mark) is read once for all its reads.
    marks = {dm: read_mark(spark, layout, dm) for dm in sc.truth}
    lake_rows = side_by_side(lambda dm, n, table: rows_as_of(spark, layout, dm, table, n, mark=marks[dm])
                             if (dm, n) in landed else None, [(dm, n, table) for dm, n, table, _ in wanted])
    for (dm, n, table, rows), got in zip(wanted, lake_rows):
        if got is not None:
            want = sorted(rows.values(), key=lambda r: tuple(r[k] for k in sc.databases[dm].tables[table].primary_key))
            equal, count = got == want, str(len(got))
        else:
            equal, count = False, "-"
        all_equal &= equal
        print(f"{dm:10} {n:>5} {table:14} {count:>9} {len(rows):>10}  {'yes' if equal else 'NO'}")
    print(f"\n{'source':16} {'delta':>5} {'table':18} {'lake rows':>9} {'truth rows':>10}  equal")
    ledger = ledger_resource(cfg).get()
    streams_equal, compared, stream_deltas = compare(streams, spark, layout, bootstrap, ledger, landed)
    all_equal &= streams_equal
    prostore = sum(1 for source, _ in landed if source in sc.truth)
    print(f"\n{prostore} of {sum(len(d) for d in sc.truth.values())} Prostore deltas landed; {stream_deltas} sealed "
          f"deltas of {len(streams)} change streams landed ({compared} compared); "
          f"{'all equal to the truth' if all_equal else 'NOT all equal to the truth'}; "
          f"{time.monotonic() - started:.0f} s")
    return 0 if all_equal else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (e.g. from a supervisor) stops the demo as cleanly as Ctrl-C


def _with_ui(sc, streams: list[DemoStream], bootstrap: str, paths: dict[str, Path], args) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, _interrupt)
    # The change streams arrive over the same time as the Prostore deltas: a slice of each story
    # after every DELTA_CLOSE.
    closes = max(1, sum(1 for m in sc.messages if m.role == SIGNAL and "DELTA_CLOSE" in m.note))
    sent = {"closes": 0}

    def pace(msg) -> None:
        if msg.role == SIGNAL and "DELTA_CLOSE" in msg.note:
            print(f"emulator: {msg.note.split(':')[0]} closed a delta", flush=True)
            k = sent["closes"] = sent["closes"] + 1
            for s in streams:
                n = len(s.story.messages)
                publish(s.story.messages[n * (k - 1) // closes: n * k // closes], bootstrap, {s.format: s.topic})
            stop.wait(args.pace)

    def emulate() -> None:
        try:
            publish(sc.messages, bootstrap, TOPICS, pace=pace)
            print("emulator: all deltas written", flush=True)
        except Exception as exc:  # the demo goes on with what was written; say why it stopped
            print(f"emulator stopped: {exc}", flush=True)

    threading.Thread(target=emulate, daemon=True, name="emulator").start()
    cmd = [str(Path(sys.executable).with_name("dagster")), "dev", "-w", str(paths["workspace"]),
           "-h", "127.0.0.1", "-p", str(args.port)]
    print(f"starting Dagster: UI at http://127.0.0.1:{args.port} (Ctrl-C stops everything)", flush=True)
    ui = subprocess.Popen(cmd, cwd=paths["root"], start_new_session=True)
    try:
        while ui.poll() is None:
            time.sleep(0.5)
        print(f"dagster dev exited with {ui.returncode}", flush=True)
        return ui.returncode or 0
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        stop.set()
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGINT)  # dagster dev shuts its webserver and daemon down on SIGINT
            try:
                ui.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(ui.pid, signal.SIGKILL)
        print("demo stopped", flush=True)
