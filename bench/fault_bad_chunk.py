"""Faults in figures (issue 31), bad input inside a backlog: one bad chunk must not stop the good
deltas before it.

A story of five deltas of one datamart (the emulator's `marketing`; the changelog of delta 2
creates `returns`, key (id, sale_id), and delta 2 writes it in one chunk) goes to the real broker
with the only copy of delta 2's `returns` chunk spoilt, and `deltaport sync` lands it in one range
run (`max_deltas_per_run` 10, as the kill cases):
- `chunk-without-key-column`: the chunk's writer schema lacks `sale_id` (a key column). It is bad
  input: the first sync lands deltas 0-1, quarantines the chunk (kind, topic, partition, offset),
  says that delta 2 waits and why, and exits 0 (before: the range run failed with
  `KeyViolationError ... NULL keys` and no delta landed, on every later sync).
- `null-key-values-in-range`: the chunk has `sale_id`, NULL in every row: its schema fits, only
  the snapshot's key check can tell. The range run fails; `sync` cuts it and lands the deltas
  before the bad one; delta 2 fails alone, named, and the sync exits 1.
Then a good re-export of delta 2 (a new incrementId) is published and a second sync lands deltas
2-4. Checked: the first sync's exit and words, and the deltas that then read as the emulator's
truth (0-1, and not the bad one); the second sync lands every delta equal to the truth, each
increment's rows once, nothing applied twice, every delta readable.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.fault_kills import DM, KillRow, KillStory, _sync, case_folder, compare_with_truth

BAD_DELTA, TABLE, KEY_COLUMN = 2, "returns", "sale_id"
DELTAS = 5
# compare_with_truth's figures (bench/fault_kills.py) the case reports.
TRUTH_FIGURES = ("rows_lost", "rows_duplicated", "increment_rows_extra", "increment_rows_missing",
                 "deltas_applied_twice", "untagged_deltas")
BAD_CHUNK_CASES: dict[str, str] = {
    "chunk-without-key-column": f"the only {TABLE} chunk of delta {BAD_DELTA}: writer schema without {KEY_COLUMN}",
    "null-key-values-in-range": f"the only {TABLE} chunk of delta {BAD_DELTA}: {KEY_COLUMN} NULL in every row",
}


@dataclass
class BadChunkRow:
    case: str
    injected: str
    first_exit: int | None = None
    first_landed: list = field(default_factory=list)  # deltas equal to the truth after the first sync
    first_said: str = ""  # the first sync's line about the bad delta
    quarantined: list = field(default_factory=list)  # "partition:offset kind" of the index's quarantine
    second_exit: int | None = None
    second_seconds: float = 0.0
    first_seconds: float = 0.0
    lake: dict = field(default_factory=dict)  # after the second sync: compare_with_truth's figures, each must be 0
    survived: bool = False
    problems: list = field(default_factory=list)

    def judge(self, expect_exit: int) -> None:
        self.survived = (self.first_exit == expect_exit and self.first_landed == list(range(BAD_DELTA))
                         and bool(self.first_said) and self.second_exit == 0 and not self.problems
                         and bool(self.lake) and not any(self.lake.values()))


def spoil(value: bytes, case: str) -> bytes:
    """The container `value` again, its key column left out of the writer schema and the rows
    (`chunk-without-key-column`) or kept and NULL in every row (`null-key-values-in-range`)."""
    import fastavro

    reader = fastavro.reader(io.BytesIO(value), return_record_name=False)
    schema = json.loads(reader.metadata["avro.schema"])
    rows = list(reader)
    if case == "chunk-without-key-column":
        schema["fields"] = [f for f in schema["fields"] if f["name"] != KEY_COLUMN]
        rows = [{k: v for k, v in r.items() if k != KEY_COLUMN} for r in rows]
    else:
        rows = [{**r, KEY_COLUMN: None} for r in rows]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), rows)
    return buf.getvalue()


def publish_bad_story(bootstrap: str, seed: int, case: str):
    """(scenario, topics, the re-export's messages held back) with delta 2's chunk spoilt."""
    from resources.emulator.outgoing import BACKUP, SIGNAL
    from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish

    sc = build_scenario(EmulatorConfig(seed=seed, deltas=DELTAS, datamarts=(DM,), backup_partitions=2,
                                       cancel_rate=0.0, ddl_at_delta=BAD_DELTA,
                                       faults=Faults(reexport_deltas=(BAD_DELTA,))))
    (_, _, again), = sc.injected["reexport"]
    held = [m for m in sc.messages if m.note.startswith(f"{DM}:{BAD_DELTA}:{again}:")]
    victims = [i for i, m in enumerate(sc.messages) if m.role == BACKUP and m not in held
               and m.note.startswith(f"{DM}:{BAD_DELTA}:") and f":{TABLE}:" in m.note]
    if len(victims) != 1:
        raise ValueError(f"seed {seed}: delta {BAD_DELTA} must write {TABLE} in one chunk, has {len(victims)}")
    messages = [m for m in sc.messages if m not in held]
    i = messages.index(sc.messages[victims[0]])
    messages[i] = replace(messages[i], value=spoil(messages[i].value, case))
    tag = uuid.uuid4().hex[:8]
    topics = {SIGNAL: f"badchunk.signal.{tag}", BACKUP: f"badchunk.backup.{tag}"}
    create_topic(bootstrap, topics[SIGNAL])
    create_topic(bootstrap, topics[BACKUP], partitions=2)
    publish(messages, bootstrap, topics)
    return sc, topics, held


def landed_as_truth(remote: str, catalog: str, warehouse: Path, sc) -> list[int]:
    """The deltas 0, 1, ... whose every table reads as the emulator's truth, up to the first that
    does not (a delta applied to some of its tables only is not landed)."""
    from resources.lake.layout import LakeLayout
    from resources.lake.read import rows_as_of
    from resources.spark.session import CatalogConfig, connect

    # A session of its own that caches no table: the lake is read again after the next sync
    # (compare_with_truth's session would otherwise keep this state of the tables for 30 s).
    spark = connect(remote, CatalogConfig(name=catalog, warehouse=str(warehouse),
                                          properties={"cache-enabled": "false"}))
    layout = LakeLayout(catalog)
    out = []
    for n in sorted(sc.truth[DM]):
        for table, state in sc.truth[DM][n].items():
            try:
                got = rows_as_of(spark, layout, DM, table, n)
            except Exception:  # noqa: BLE001 - not readable as of n (not landed): the answer
                return out
            if len(got) != len(state) or any(want not in got for want in state.values()):
                return out
        out.append(n)
    return out


def run_bad_chunk_case(bootstrap: str, remote: str, case: str, work: Path, *, seed: int = 7,
                       timeout: float = 600) -> BadChunkRow:
    from resources.emulator.outgoing import BACKUP
    from resources.kafka.publish import publish
    from resources.prostore.delta_index import DeltaIndex

    row = BadChunkRow(case, BAD_CHUNK_CASES[case])
    sc, topics, held = publish_bad_story(bootstrap, seed, case)
    folder, catalog, env = case_folder(work, case, bootstrap, KillStory(sc, topics), remote)
    began = time.perf_counter()
    first = _sync(folder, env, timeout)
    row.first_seconds = round(time.perf_counter() - began, 2)
    row.first_exit = first.returncode
    said = first.stdout + first.stderr
    # The sync's last line about the bad delta: what it concluded (a cut range names it first).
    row.first_said = next((line for line in reversed(first.stdout.splitlines()) if f"delta {BAD_DELTA}" in line
                           and (KEY_COLUMN in line or "NULL keys" in line)), "")
    if not row.first_said:
        row.problems.append(f"the first sync did not say why delta {BAD_DELTA} did not land: {said[-2000:]}")
    row.quarantined = [f"{q['partition']}:{q['offset']} {q['kind']}"
                       for q in DeltaIndex(folder / "state" / "index.sqlite").quarantine(topics[BACKUP])]
    row.first_landed = landed_as_truth(remote, catalog, folder / "lake", sc)

    publish(held, bootstrap, topics)  # the good re-export of the bad delta
    began = time.perf_counter()
    second = _sync(folder, env, timeout)
    row.second_seconds = round(time.perf_counter() - began, 2)
    row.second_exit = second.returncode
    if second.returncode != 0:
        row.problems.append(f"the second sync failed (exit {second.returncode}): "
                            f"{(second.stdout + second.stderr)[-1500:]}")
    lake = KillRow(case, "")
    compare_with_truth(lake, remote, catalog, folder / "lake", sc)
    row.lake = {name: getattr(lake, name) for name in TRUTH_FIGURES}
    row.problems += lake.problems
    row.judge(expect_exit=0 if case == "chunk-without-key-column" else 1)
    return row


def print_bad_chunk_row(row: BadChunkRow) -> None:
    print(f"{row.case:<26} first sync exit {row.first_exit} in {row.first_seconds:.1f} s, landed deltas "
          f"{row.first_landed}, quarantined {row.quarantined}; after the re-export: exit {row.second_exit} in "
          f"{row.second_seconds:.1f} s, " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in row.lake.items())
          + f", survived {row.survived}", flush=True)
    print(f"    first sync said: {row.first_said}", flush=True)
    for p in row.problems:
        print(f"    {p}", flush=True)
