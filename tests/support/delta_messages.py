"""One closed Prostore delta as a writer publishes it (pure: no broker): its signal events
(DELTA_OPEN, a WRITE_OK per changed table, DELTA_CLOSE) and its BACKUP_TO_KAFKA increment, for
stories that build their own datamart (tests/support/wide_story.py, bench/width_bench.py).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence

from resources.codecs.backup import ChangelogRecord
from resources.codecs.backup_writer import BackupWriteOptions, TableChanges, encode_increment
from resources.codecs.signal import DeltaClose, DeltaOpen, SignalEvent, SignalKey, WriteOk, encode_signal
from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing

START = dt.datetime(2024, 2, 28, 8, 0, 0, tzinfo=dt.timezone.utc)
_CODES = {DeltaOpen: "DELTA_OPEN", WriteOk: "WRITE_OK", DeltaClose: "DELTA_CLOSE"}


def closed_delta_messages(datamart: str, n: int, changelog: Sequence[ChangelogRecord],
                          tables: Mapping[str, TableChanges], *, first_write: int) -> list[Outgoing]:
    """Delta n of `datamart`, opened at START + n minutes and closed 30 s later; its WRITE_OKs
    numbered from `first_write` on, one per table of `tables` (the caller counts them)."""
    when = START + dt.timedelta(minutes=n)
    signals = [DeltaOpen(n)]
    for i, (table, part) in enumerate(tables.items()):
        signals.append(WriteOk(table, first_write + i, int(when.timestamp() * 1_000_000), len(part.rows)))
    signals.append(DeltaClose(n, when + dt.timedelta(seconds=30)))
    msgs = []
    for i, value in enumerate(signals):
        code = _CODES[type(value)]
        k, v = encode_signal(SignalEvent(SignalKey(datamart, when + dt.timedelta(seconds=i), code,
                                                   str(uuid.uuid4())), value))
        msgs.append(Outgoing(SIGNAL, 0, k, v, f"{datamart}:{code}"))
    date_us = int((when + dt.timedelta(seconds=30)).timestamp() * 1_000_000)
    for m in encode_increment(datamart, n, date_us, str(uuid.uuid4()), changelog, tables,
                              BackupWriteOptions(chunk_size=1000, streams=1, partitions=1)):
        msgs.append(Outgoing(BACKUP, m.partition, m.key, m.value, m.note))
    return msgs
