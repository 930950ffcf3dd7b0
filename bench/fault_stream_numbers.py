"""Faults in figures (issue 31), numbers in the change streams: Qlik, DataWorks and Datastream
messages whose numbers no writer sends, read by the sealer under a memory cap.

An emulated story of the format goes to a topic of its own, padded to `total` messages with
adversarial copies of its JSON messages: one to three numeric leaves (event times, sequence ids,
positions, counters, table versions, column values; integers, floats and digit strings) replaced
by extreme JSON numbers (20 digits, 2^63, 2^64, 5000 digits, 1e99999999, -1e99999999, 1e400),
and a few arrays nested 100000 deep. The sealer's reading code (`seal_topic`, tick after tick, as
the sensor runs it) reads the topic in a child process under RLIMIT_AS (bench/fault_numbers.py).

Checked (a row of the report): the child exits 0 with peak RSS under `LIMIT_MIB`; every message
is read; no good message is quarantined; every quarantine names topic, partition and offset;
every adversarial message accepted as valid can be landed by the lake beside the story's good
changes (bench/fault_stories.py `unlandable`), so none fails its delta; and sealing goes on: at least
as many deltas are sealed as from the story alone (an accepted position far above the real ones
must not make every later message look like a copy).

The child is `python bench/fault_numbers.py seal ...` (`seal` below).
"""

from __future__ import annotations

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

STREAM_FORMATS = ("qlik", "dataworks", "datastream")
# Raw JSON number tokens no writer of these formats sends for a time, position or count.
EXTREMES = ("1" + "0" * 20, str(2**63), str(2**64), "-" + str(2**63 + 1), "9" * 5000, "1e99999999",
            "-1e99999999", "1e400")
DEEP = b"[" * 100_000 + b"]" * 100_000


@dataclass
class StreamNumbersRow:
    case: str
    produced: int = 0
    adversarial: int = 0
    peak_mib: float = 0.0  # of the sealer's child process
    seconds: float = 0.0
    read: int = 0
    quarantined: int = 0
    good_quarantined: int = 0
    without_location: int = 0
    accepted: int = 0  # adversarial messages that decoded as valid
    accepted_unlandable: int = 0  # of them, ones the lake could not land beside the good changes
    deltas: int = 0
    story_deltas: int = 0  # sealed from the story alone, the same way
    problems: list = field(default_factory=list)
    survived: bool = False

    def judge(self) -> None:
        self.survived = (not self.problems and self.peak_mib < LIMIT_MIB and self.read == self.produced
                         and self.good_quarantined == 0 and self.without_location == 0
                         and self.accepted_unlandable == 0)

    def summary(self) -> str:
        return (f"{self.case:<20} messages {self.produced} ({self.adversarial} adversarial): seal "
                f"{self.peak_mib:.0f} MiB {self.seconds:.1f} s, read {self.read}, quarantined {self.quarantined} "
                f"(good {self.good_quarantined}), adversarial accepted {self.accepted} (the lake could not land "
                f"{self.accepted_unlandable}), deltas {self.deltas} (the story alone {self.story_deltas}), "
                f"survived {self.survived}")


def with_extremes(value: bytes, rng: random.Random) -> bytes | None:
    """A copy of a JSON message with one to three numeric leaves replaced by extreme numbers (None
    when the message is not JSON or has no number)."""
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    leaves: list[tuple[object, object]] = []  # (container, key) of every number or digit string

    def walk(node) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if (isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and v.isdigit()):
                leaves.append((node, k))
            walk(v)

    walk(doc)
    if not leaves:
        return None
    tokens = {}
    for n, (node, k) in enumerate(rng.sample(leaves, min(len(leaves), rng.randint(1, 3)))):
        node[k] = f"@@extreme{n}@@"
        tokens[f'"@@extreme{n}@@"'] = rng.choice(EXTREMES)
    text = json.dumps(doc)
    for marker, token in tokens.items():
        text = text.replace(marker, token)
    return text.encode()


def run_stream_numbers_case(bootstrap: str, fmt: str, work: Path, *, seed: int = 7,
                            total: int = 1000) -> StreamNumbersRow:
    from bench.fault_stories import fault_story, unlandable
    from resources.changestream.ledger import CdcLedger
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish
    from resources.state.store import StateStore

    rng = random.Random(f"{seed}:{fmt}:numbers")
    story = fault_story(fmt, seed)
    items = [(m, m.value, "good", False) for m in story]
    sources = [m for m in story if m.value and with_extremes(m.value, random.Random(0)) is not None]
    while len(items) < total and sources:
        src = rng.choice(sources)
        value = DEEP if rng.random() < 0.02 else with_extremes(src.value, rng)
        at = next(i for i, it in enumerate(items) if it[0] is src) + 1 + rng.randrange(3)  # after what it copies
        items.insert(min(at, len(items)), (src, value, "adversarial", False))
    row = StreamNumbersRow(f"numbers-{fmt}", produced=len(items),
                           adversarial=sum(kind == "adversarial" for _, _, kind, _ in items))
    tag = uuid.uuid4().hex[:8]
    topic, alone = f"numbers.{fmt}.{tag}", f"numbers.{fmt}.story.{tag}"
    for name, batch in ((topic, items), (alone, [(m, m.value, "good", False) for m in story])):
        create_topic(bootstrap, name, partitions=1)
        # One partition, in order: a message's offset is its index in `items`.
        publish([replace(m, partition=0, value=v) for m, v, _, _ in batch], bootstrap,
                {m.role: name for m, *_ in batch})

    runs = {}
    for name in (alone, topic):
        runs[name] = run_capped([sys.executable, str(Path(__file__).with_name("fault_numbers.py")), "seal", "-b",
                                 bootstrap, "--topic", name, "--format", fmt, "--state", str(work / f"{name}.sqlite")])
    run, state = runs[topic], work / f"{topic}.sqlite"
    row.peak_mib, row.seconds = run.peak_mib, run.seconds
    if runs[alone].returncode == 0:
        row.story_deltas = json.loads(runs[alone].stdout)["deltas"]
    if run.returncode != 0:
        row.problems.append(f"seal exited {run.returncode}: {run.stderr[-800:]}")
    else:
        out = json.loads(run.stdout)
        row.read, row.deltas = out["read"], out["deltas"]
        if row.deltas < row.story_deltas:
            row.problems.append(f"sealing stalled: {row.deltas} deltas, the story alone seals {row.story_deltas}")
        bad = CdcLedger(StateStore(state)).quarantine(fmt)
        offsets = {b["offset"] for b in bad if b.get("topic") == topic and b.get("partition") == 0}
        row.without_location = len(bad) - len(offsets)
        row.quarantined = len(offsets)
        row.good_quarantined = sum(kind == "good" and i in offsets for i, (_, _, kind, _) in enumerate(items))
        row.accepted = sum(kind == "adversarial" and i not in offsets for i, (_, _, kind, _) in enumerate(items))
        row.accepted_unlandable = len(unlandable(fmt, items, offsets))
    row.judge()
    return row


def seal(args) -> int:
    """The child: the sealer's reading code, tick after tick, until the topic is read."""
    from resources.changestream.ledger import CdcLedger
    from resources.changestream.sealing import SealPolicy, seal_topic
    from resources.state.store import StateStore

    ledger, policy = CdcLedger(StateStore(Path(args.state))), SealPolicy(args.format, max_rows=50)
    read = deltas = ticks = 0
    while ticks < 1000:
        res = seal_topic(args.bootstrap_servers, args.topic, args.format, ledger, policy,
                         max_messages=args.max_messages)
        ticks += 1
        read += res.read
        deltas += len(res.new_deltas)
        if not res.remaining and not res.read:
            break
    print(json.dumps({"ticks": ticks, "read": read, "deltas": deltas}))
    return 0
