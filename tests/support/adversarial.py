"""Messages whose numbers no writer sends, mixed into a story: the fault of issue 31.

`adversarial_numbers(messages, total, rng)` returns the story's messages with adversarial ones
inserted up to `total` messages per topic role:
- backup: copies of the story's keys with extreme numbers in every numeric field (chunkNumber,
  streamNumber, streamTotal, deltaNum, deltaDate), each marked last chunk, under an incrementId
  of its own (an export nobody finished), inserted before the good export they copy, as in the
  issue: a key saying chunkNumber 9223372036854775807, then a good export of the same delta.
  The chunk number is never 1 and the others are extreme, so no adversarial increment is ever
  complete: the story's good exports are what a reader must choose and land.
- signal: DELTA_OPEN/CLOSE/CANCEL with extreme deltaNums (JSON integers of 20 and of 5000 digits
  among them) and WRITE_OK/WRITE_CANCEL with extreme cn, ts and rowsAffected, on the story's
  datamart; eventLogIds of their own.
Half of the extremes are within `resources.codecs.limits` (they reach the completeness ledger,
which must stay bounded), half beyond (bad messages, quarantined with their coordinates). Each
message's note starts with `ADVERSARIAL`, and with `ADVERSARIAL:refused` when a reader must
quarantine it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid

from resources.codecs.backup import decode_backup_key, encode_backup_key
from resources.codecs import limits
from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing

NOTE = "ADVERSARIAL"
REFUSED = NOTE + ":refused"

# (value, within the limits) per backup key field; chunk numbers are never 1 (see above).
L = limits
_CHUNKS = [(L.LONG_MAX, False), (L.MAX_CHUNK_NUMBER + 1, False), (2**62, False), (L.MAX_CHUNK_NUMBER, True),
           (999_999, True), (2**31 - 1, False), (0, True), (L.LONG_MIN, True)]
_STREAMS = [(L.LONG_MAX, False), (L.MAX_STREAMS + 1, False), (L.MAX_STREAMS, True), (0, True), (L.LONG_MIN, True)]
_DELTAS = [(L.LONG_MAX, False), (-1, False), (L.LONG_MIN, False), (L.MAX_DELTA_NUM + 1, False),
           (L.MAX_DELTA_NUM, True)]
_DATES = [(L.LONG_MAX, False), (L.LONG_MIN, False), (L.MAX_TIMESTAMP_US + 1, False), (L.MAX_TIMESTAMP_US, True),
          (L.MIN_TIMESTAMP_US, True)]
# JSON text of a signal number, and whether the codec must refuse it.
_SIGNAL_DELTAS = [("1" + "0" * 20, True), ("9" * 5000, True), ("-1", True), (str(2**63), True),
                  (str(L.MAX_DELTA_NUM + 1), True), (str(L.MAX_DELTA_NUM), False)]
_SIGNAL_LONGS = [(str(2**63), True), (str(-(2**63) - 1), True), ("9" * 5000, True), (str(L.LONG_MAX), False)]


def adversarial_numbers(messages: list[Outgoing], total: int, rng: random.Random) -> list[Outgoing]:
    """The story's `messages` with adversarial ones inserted, up to `total` messages per role."""
    before: dict[int, list[Outgoing]] = {}  # index of a story message -> inserted ahead of it
    for role, make in ((BACKUP, _backup), (SIGNAL, _signal)):
        good = [i for i, m in enumerate(messages) if m.role == role]
        for n in range(max(0, total - len(good)) if good else 0):
            if role == BACKUP and n == 0:  # the issue's message, ahead of the first good export
                issue = _backup(messages[good[0]], 0, rng, chunk=L.LONG_MAX)
                before.setdefault(good[0], []).append(issue)
                continue
            # A copy of a random good message, ahead of another, so good ones follow it.
            before.setdefault(rng.choice(good), []).append(make(messages[rng.choice(good)], n, rng))
    return [m for i, original in enumerate(messages) for m in (*before.get(i, ()), original)]


def _backup(src: Outgoing, i: int, rng: random.Random, chunk: int | None = None) -> Outgoing:
    """A copy of `src` under an export of its own; `chunk`: that chunk number and nothing else."""
    key = decode_backup_key(src.key)
    chunk_number, ok = (chunk, chunk <= L.MAX_CHUNK_NUMBER) if chunk is not None else rng.choice(_CHUNKS)
    changes = {"chunk_number": chunk_number, "is_last_chunk": True,
               "increment_id": str(uuid.UUID(int=rng.getrandbits(128), version=4))}
    for name, choices in (("stream_number", _STREAMS), ("stream_total", _STREAMS), ("delta_num", _DELTAS),
                          ("delta_date", _DATES)):
        if chunk is None and rng.random() < 0.35:
            changes[name], fits = rng.choice(choices)
            ok = ok and fits
    bad = dataclasses.replace(key, **changes)
    note = f"{REFUSED if not ok else NOTE} {i}: {changes}"
    return Outgoing(BACKUP, src.partition, encode_backup_key(bad, sync_marker=rng.randbytes(16)), src.value, note)


def _signal(src: Outgoing, i: int, rng: random.Random) -> Outgoing:
    datamart = json.loads(src.key)["datamart"]
    code = rng.choice(["DELTA_OPEN", "DELTA_CLOSE", "DELTA_CANCEL", "WRITE_OK", "WRITE_CANCEL"])
    key = {"datamart": datamart, "datetime": "2024-02-28 09:00:00", "event": code,
           "eventLogId": str(uuid.UUID(int=rng.getrandbits(128), version=4))}
    if code.startswith("DELTA_"):
        number, refused = rng.choice(_SIGNAL_DELTAS)
        close = ', "deltaDate": "2024-02-28 09:00:00"' if code == "DELTA_CLOSE" else ""
        value = f'{{"deltaNum": {number}{close}}}'
    else:
        field = rng.choice(["cn", "ts", "rowsAffected"] if code == "WRITE_OK" else ["cn"])
        number, refused = rng.choice(_SIGNAL_LONGS)
        if field == "rowsAffected" and number.startswith("-"):
            refused = True
        fields = {"cn": "1", "ts": "1709110800000000", "rowsAffected": "1"} if code == "WRITE_OK" else {"cn": "1"}
        fields[field] = number
        value = "{" + ", ".join(f'"{k}": {v}' for k, v in {"entity": '"sales"', **fields}.items()) + "}"
    note = f"{REFUSED if refused else NOTE} {i}: {code} {value[:80]}"
    return Outgoing(SIGNAL, src.partition, json.dumps(key).encode(), value.encode(), note)
