"""Faults in figures (issue 11), load: a soak of hundreds of deltas over two datamarts through the
Dagster daemon at a steady rate, with faults sprinkled in, memory sampled all along.

One deployment (bench/fault_daemon.py's: deltaport.yaml, a workspace, a Dagster instance with the
project's dagster.yaml) and `dagster-daemon run`. An emulated Prostore story of two datamarts
(`marketing`, `sourcedb`; duplicates, malformed messages, lagging backups, cancelled deltas, a DDL
change) is published as a Prostore would: a DELTA_CLOSE every `pace` seconds. Sprinkled in: a run
worker SIGKILLed once in a snapshot step (retried by the daemon), and the daemon itself
SIGKILLed halfway and started again. Memory (RSS) of the daemon, its code server, the run
workers and the Spark server is sampled every few seconds.

Reported: deltas landed, time, runs (failed, retried, deltas per run), the lake against the truth
(every `compare_every`-th delta and the last of each datamart as of that delta, every increment
row, applied-twice and tag checks on every delta), and memory over the soak: the median RSS of the
daemon and the code server in the first and the last quarter, and the run workers' peak RSS in
the first and the last ten runs (flat: the last within 25% of the first).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fault_daemon import Daemon, _deployment, runs_finished, watch
from bench.fault_kills import KillRow, compare_with_truth

DATAMARTS = ("marketing", "sourcedb")


@dataclass
class SoakRow(KillRow):
    published_seconds: float = 0.0
    landed_seconds: float = 0.0  # from the first message to the last delta landed
    runs: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # part -> {"first": MiB, "last": MiB}
    flat: bool = False


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class _Sampler(threading.Thread):
    """RSS of the daemon, its code servers and run workers (their children), and the Spark server."""

    def __init__(self, spark_pid: int | None, every: float = 3.0):
        super().__init__(daemon=True)
        self.daemon_pid: int | None = None
        self.spark_pid, self.every = spark_pid, every
        self.samples: list[dict] = []
        self.worker_peaks: dict[int, float] = {}  # run worker pid -> peak RSS
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            pid = self.daemon_pid
            if pid is None:
                continue
            servers = [c for c in _children(pid) if "api grpc" in _cmdline(c)]
            workers = [w for s in servers for w in _children(s) if "resource_tracker" not in _cmdline(w)]
            for w in workers:
                self.worker_peaks[w] = max(self.worker_peaks.get(w, 0.0), _rss_mib(w))
            self.samples.append({"t": time.monotonic(), "daemon": _rss_mib(pid),
                                 # the largest: the daemon reloads its workspace every minute, and
                                 # the code server it replaces lingers until its heartbeat times out
                                 "code_server": max((_rss_mib(s) for s in servers), default=0.0),
                                 "spark_server": _rss_mib(self.spark_pid) if self.spark_pid else 0.0})


def run_soak(bootstrap: str, remote: str, work: Path, *, deltas: int = 250, pace: float = 2.0, seed: int = 7,
             compare_every: int = 5, spark_pid: int | None = None, timeout: float = 7200) -> SoakRow:
    """`deltas` per datamart (two datamarts), a DELTA_CLOSE every `pace` seconds."""
    import uuid

    import dagster as dg
    import yaml

    from bench.fault_kills import KillStory, case_folder
    from platform_assets.deltas.partitions import partition_key
    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish

    sc = build_scenario(EmulatorConfig(seed=seed, deltas=deltas, datamarts=DATAMARTS, chunk_size=8, backup_partitions=2,
                                       cancel_rate=0.05, ddl_at_delta=3,
                                       faults=Faults(duplicate_rate=0.03, malformed=True, lagging_deltas=(7,))))
    tag = uuid.uuid4().hex[:8]
    topics = {SIGNAL: f"soak.signal.{tag}", BACKUP: f"soak.backup.{tag}"}
    create_topic(bootstrap, topics[SIGNAL])
    create_topic(bootstrap, topics[BACKUP], partitions=2)
    row = SoakRow("soak", f"{deltas} deltas x {len(DATAMARTS)} datamarts, a DELTA_CLOSE every {pace:g} s; "
                          "a run worker killed once; the daemon killed halfway")
    folder, catalog, env = case_folder(work, "soak", bootstrap, KillStory(sc, topics), remote)
    raw = yaml.safe_load((folder / "deltaport.yaml").read_text())
    raw["datamarts"] = [{"name": dm, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]} for dm in DATAMARTS]
    raw["sensor"] = {"max_messages_per_tick": 5000, "max_deltas_per_run": 20}
    (folder / "deltaport.yaml").write_text(yaml.safe_dump(raw))
    env = _deployment(folder, env)
    fired, log = folder / "failpoint.fired", folder / "daemon.log"
    armed = {**env, "DELTAPORT_FAILPOINTS": "snapshot.committed@2", "DELTAPORT_FAILPOINTS_ONCE": str(fired)}
    want = {dm: {partition_key(n) for n in sc.truth[dm]} for dm in DATAMARTS}
    sampler = _Sampler(spark_pid)
    sampler.start()
    daemon = Daemon(folder, armed, log)
    sampler.daemon_pid = daemon.proc.pid
    began = time.monotonic()
    closes = [0]

    def paced(msg) -> None:
        if msg.role == SIGNAL and "DELTA_CLOSE" in msg.note:
            closes[0] += 1
            time.sleep(pace)

    publisher = threading.Thread(target=lambda: publish(sc.messages, bootstrap, topics, pace=paced), daemon=True)
    publisher.start()
    half = len(DATAMARTS) * deltas // 2
    restarted = []

    def restart_halfway() -> None:
        if not restarted and closes[0] >= half:
            daemon.restart(env)  # the daemon, its code server and any run it had going
            sampler.daemon_pid = daemon.proc.pid
            restarted.append(True)
        if not publisher.is_alive() and not row.published_seconds:
            row.published_seconds = round(time.monotonic() - began, 1)

    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            def done() -> dict[str, set[str]]:
                return {dm: set(instance.get_materialized_partitions(dg.AssetKey([dm, "snapshot"])))
                        for dm in DATAMARTS}

            problem = watch(daemon, on_tick=restart_halfway, deadline=began + timeout, every=2,
                            landed=lambda: not publisher.is_alive() and all(
                                got >= want[dm] for dm, got in done().items()),
                            not_landed=lambda: f"not landed within {timeout:.0f} s: "
                                               f"{ {dm: len(got) for dm, got in done().items()} } of {deltas}")
            if problem:
                row.problems.append(problem)
            else:
                row.landed_seconds = round(time.monotonic() - began, 1)
                row.recovered = True
            runs_finished(instance, 120)
            runs = instance.get_runs(limit=100_000)
            sizes = [_range_size(r.tags) for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
            row.runs = {"runs": len(runs), "succeeded": len(sizes),
                        "failed": sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs),
                        "retries": sum("dagster/parent_run_id" in r.tags for r in runs),
                        "deltas_per_run_median": statistics.median(sizes) if sizes else 0,
                        "deltas_per_run_max": max(sizes, default=0)}
    finally:
        daemon.stop()
        sampler.stop.set()
    row.killed = fired.exists() and bool(restarted)
    if not fired.exists():
        row.problems.append("the run-worker failpoint never fired")
    row.memory, row.flat = _memory_report(sampler)
    for dm in DATAMARTS:
        sample = sorted(set(range(0, deltas, compare_every)) | {max(sc.truth[dm])})
        compare_with_truth(row, remote, catalog, folder / "lake", sc, dm=dm, deltas=sample)
    row.judge()
    row.survived = row.survived and row.flat
    return row


def _range_size(tags) -> int:
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if start and end:
        return int(end) - int(start) + 1
    return 1


def _memory_report(sampler: _Sampler) -> tuple[dict, bool]:
    samples = sampler.samples
    report, flat = {}, True
    if len(samples) >= 8:
        quarter = len(samples) // 4
        for part in ("daemon", "code_server", "spark_server"):
            first = statistics.median(s[part] for s in samples[:quarter])
            last = statistics.median(s[part] for s in samples[-quarter:])
            report[part] = {"first_mib": round(first), "last_mib": round(last), "max_mib": round(max(s[part] for s in samples))}
            if part != "spark_server" and first and last > first * 1.25:
                flat = False
    peaks = list(sampler.worker_peaks.values())
    if len(peaks) >= 4:
        k = min(10, len(peaks) // 2)
        first, last = statistics.median(peaks[:k]), statistics.median(peaks[-k:])
        report["run_workers"] = {"first_mib": round(first), "last_mib": round(last), "max_mib": round(max(peaks)),
                                 "workers": len(peaks)}
        flat = flat and last <= first * 1.25
    return report, flat


def print_soak_row(row: SoakRow) -> None:
    print(f"{row.case:<34} {row.injected}\n    landed {row.recovered} in {row.landed_seconds:.0f} s (published in "
          f"{row.published_seconds:.0f} s), runs {row.runs}, rows lost {row.rows_lost}, duplicated "
          f"{row.rows_duplicated}, increment rows extra {row.increment_rows_extra} missing "
          f"{row.increment_rows_missing}, deltas applied twice {row.deltas_applied_twice}, untagged "
          f"{row.untagged_deltas}\n    memory (MiB) {row.memory}, flat {row.flat}, survived {row.survived}", flush=True)
    for p in row.problems:
        print(f"    {p}", flush=True)
