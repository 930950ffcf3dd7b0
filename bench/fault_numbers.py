"""Faults in figures (issue 31), numbers: messages claiming numbers no writer sends, in every
numeric field, cost bounded memory and time, and the good messages after them still land.

A Prostore story (one datamart, a few deltas) goes to a backup and a signal topic, each padded
to `total` messages (1000) with adversarial ones (tests/support/adversarial.py: a key saying
chunkNumber 2^63 - 1, marked last, ahead of the good export of its delta; extreme streamNumber,
streamTotal, deltaNum and deltaDate; DELTA_* with 20- and 5000-digit deltaNums; WRITE_* with
cn, ts and rowsAffected beyond a long). Two readers then run, each in a child process of its own
under a memory cap (RLIMIT_AS, `bench.capped.CAP_MIB`), so that a reader which trusts a number fails with
MemoryError instead of taking the host down, and its peak RSS is measured exactly (wait4):
- `deltaport inspect --json` on each topic;
- the sensor's reading code, as `deltaport sync` runs it before any Spark work (`evaluate`:
  `ingest_topic` of both topics into a delta index in bounded ticks, then the completeness of
  every delta it walks), tick after tick until everything is read.

Checked (a row of the report): every child exits 0 under the cap with peak RSS under
`LIMIT_MIB`; every adversarial message a codec must refuse is quarantined with its topic,
partition and offset (inspect counts them, the index holds exactly their offsets) and no good
message is; every delta of the story is complete with its good export chosen and is due.
That the due deltas then land equal to the truth is tests/integration/test_adversarial_numbers.py.

    python bench/fault_numbers.py tick|seal ...   (the children; see `main`)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.capped import LIMIT_MIB, run_capped  # noqa: E402

DM = "marketing"


@dataclass
class NumbersRow:
    case: str
    produced: dict = field(default_factory=dict)  # role -> messages in its topic
    refused: dict = field(default_factory=dict)  # role -> adversarial messages a codec must refuse
    inspect: dict = field(default_factory=dict)  # role -> {"peak_mib", "seconds", "bad"}
    ingest: dict = field(default_factory=dict)  # {"peak_mib", "seconds", "ticks", "due"}
    quarantined: int = 0
    refused_quarantined: int = 0
    good_quarantined: int = 0
    deltas: int = 0
    deltas_due: int = 0
    problems: list = field(default_factory=list)
    survived: bool = False

    @property
    def peak_mib(self) -> float:
        return max([v["peak_mib"] for v in self.inspect.values()] + [self.ingest.get("peak_mib", 0)])

    def judge(self) -> None:
        self.survived = (not self.problems and self.peak_mib < LIMIT_MIB and self.good_quarantined == 0
                         and self.refused_quarantined == sum(self.refused.values()) == self.quarantined
                         and self.deltas_due == self.deltas)

    def summary(self) -> str:
        ins = ", ".join(f"{role} {v['peak_mib']:.0f} MiB {v['seconds']:.1f} s" for role, v in self.inspect.items())
        ingest = self.ingest
        return (f"{self.case:<20} messages {self.produced}, refused {self.refused}: inspect {ins}; ingest "
                f"{ingest.get('peak_mib', 0):.0f} MiB {ingest.get('seconds', 0):.1f} s in {ingest.get('ticks')} "
                f"ticks; quarantined {self.quarantined} (refused ones {self.refused_quarantined}, good "
                f"{self.good_quarantined}), deltas due {self.deltas_due}/{self.deltas}, survived {self.survived}")


def run_numbers_case(bootstrap: str, work: Path, *, seed: int = 7, total: int = 1000) -> NumbersRow:
    from tests.support.adversarial import NOTE, REFUSED, adversarial_numbers
    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish
    from resources.prostore.delta_index import DeltaIndex
    from resources.state.store import StateStore

    sc = build_scenario(EmulatorConfig(seed=seed, deltas=5, datamarts=(DM,), chunk_size=5, faults=Faults()))
    story = [replace(m, partition=0) for m in sc.messages]  # one partition: offset = place in the topic
    messages = adversarial_numbers(story, total, random.Random(f"{seed}:numbers"))
    tag = uuid.uuid4().hex[:8]
    topics = {BACKUP: f"numbers.backup.{tag}", SIGNAL: f"numbers.signal.{tag}"}
    for topic in topics.values():
        create_topic(bootstrap, topic, partitions=1)
    publish(messages, bootstrap, topics)
    row = NumbersRow("numbers-prostore", deltas=len(sc.truth[DM]))
    by_role = {role: [m for m in messages if m.role == role] for role in topics}
    for role, ms in by_role.items():
        row.produced[role] = len(ms)
        row.refused[role] = sum(m.note.startswith(REFUSED) for m in ms)

    cli = [sys.executable, "-m", "platform_assets.cli", "inspect", "-b", bootstrap, "--json", "--topic"]
    for role, topic in topics.items():
        run = run_capped([*cli, topic])
        row.inspect[role] = {"peak_mib": run.peak_mib, "seconds": run.seconds}
        if run.returncode != 0:
            row.problems.append(f"inspect {role} exited {run.returncode}: {run.stderr[-800:]}")
            continue
        doc = json.loads(run.stdout)
        row.inspect[role]["bad"] = doc["bad_messages"]
        if doc["messages"] != row.produced[role] or doc["bad_messages"] != row.refused[role]:
            row.problems.append(f"inspect {role}: {doc['messages']} messages, {doc['bad_messages']} bad "
                                f"({doc['bad_messages_by_kind']}); expected {row.produced[role]}, {row.refused[role]}")
        if role == BACKUP:
            chosen = {d["delta_num"]: d["chosen"] for dm in doc["backup"]["datamarts"] for d in dm["deltas"]}
            wrong = {n: chosen.get(n) for n in sc.truth[DM] if chosen.get(n) != _good_export(story, n)}
            if wrong:
                row.problems.append(f"inspect chose another export (or none) for deltas {wrong}")

    state = work / f"numbers-{tag}.sqlite"
    run = run_capped([sys.executable, str(Path(__file__)), "tick", "-b", bootstrap, "--state", str(state),
                      "--backup-topic", topics[BACKUP], "--signal-topic", topics[SIGNAL]])
    row.ingest = {"peak_mib": run.peak_mib, "seconds": run.seconds}
    if run.returncode != 0:
        row.problems.append(f"ingest exited {run.returncode}: {run.stderr[-800:]}")
    else:
        ticks = json.loads(run.stdout)
        row.ingest.update(ticks=ticks["ticks"], due=ticks["due"])
        row.deltas_due = len(set(ticks["due"]) & set(sc.truth[DM]))
        if sorted(ticks["due"]) != sorted(sc.truth[DM]):
            row.problems.append(f"due deltas {ticks['due']}, expected {sorted(sc.truth[DM])}; "
                                f"waiting: {ticks['waiting']}")
        index = DeltaIndex(StateStore(state))
        for role, topic in topics.items():
            bad = index.quarantine(topic)
            offsets = {q["offset"] for q in bad if q["partition"] == 0}
            row.quarantined += len(bad)
            row.problems += [f"quarantined without coordinates: {q}" for q in bad if q["partition"] is None]
            for offset, m in enumerate(by_role[role]):
                refused = m.note.startswith(REFUSED)
                row.refused_quarantined += refused and offset in offsets
                row.good_quarantined += not m.note.startswith(NOTE) and offset in offsets
    row.judge()
    return row


def _good_export(story: list, delta: int) -> str | None:
    """The incrementId of the story's export of `delta` (notes: datamart:delta:incrementId:...)."""
    return next((m.note.split(":")[2] for m in story if m.note.startswith(f"{DM}:{delta}:")), None)


def print_numbers_row(row) -> None:
    """A row of either numbers case (this module's or bench/fault_stream_numbers.py's), with its problems."""
    print("\n".join([row.summary(), *(f"    {p}" for p in row.problems)]), flush=True)


def tick(args) -> int:
    """The child: the sensor's reading code (`evaluate`), tick after tick, as `sync` runs it."""
    from platform_assets.config import DatamartConfig
    from platform_assets.prostore.sensors import evaluate
    from resources.kafka.resource import KafkaResource
    from resources.prostore.delta_index import DeltaIndex
    from resources.state.store import StateStore

    datamart = DatamartConfig(DM, args.backup_topic, args.signal_topic)
    index, kafka = DeltaIndex(StateStore(Path(args.state))), KafkaResource(bootstrap_servers=args.bootstrap_servers)
    cursor, due, ticks, waiting = {}, [], 0, None
    while ticks < 1000:
        got, waiting, cursor, _ = evaluate(datamart, index, kafka, cursor, max_messages=args.max_messages)
        ticks += 1
        due += got
        if not got and not cursor.get("unread"):
            break
    print(json.dumps({"ticks": ticks, "due": due, "waiting": waiting}))
    return 0


def main(argv=None) -> int:
    from bench.fault_stream_numbers import STREAM_FORMATS, seal

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tick", help="the child: evaluate the sensor of one datamart until all is read")
    t.add_argument("--backup-topic", required=True)
    t.add_argument("--signal-topic", default=None)
    t.set_defaults(run=tick)
    s = sub.add_parser("seal", help="the child: seal one change-stream topic until it is read")
    s.add_argument("--topic", required=True)
    s.add_argument("--format", required=True, choices=STREAM_FORMATS)
    s.set_defaults(run=seal)
    for p in (t, s):
        p.add_argument("--bootstrap-servers", "-b", required=True)
        p.add_argument("--state", required=True, help="the delta index's or the ledger's SQLite file")
        p.add_argument("--max-messages", type=int, default=200, help="messages per topic per tick")
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
