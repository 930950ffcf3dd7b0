"""What a message may claim: the bounds every codec holds the numbers it reads from the wire to.

A number in a message is a claim, not a size. Code that enumerates up to a claimed number (the
chunks missing below a `chunkNumber`), allocates by it (an Avro block's record count), or stores
it in a 64-bit column trusts it; one message claiming 2^63 then costs unbounded memory, time or a
crash of the reader, and every good message after it waits. So a codec refuses, as a bad message
of its own kind (quarantined with its topic, partition and offset, counted, never silently
skipped), any number outside what a real writer can send:

- delta numbers (backup key `deltaNum`, signal `deltaNum`): 0..MAX_DELTA_NUM, 10^9 (a delta
  closed every second for 31 years);
- backup key `streamNumber`, `streamTotal`: at most MAX_STREAMS, 10^6 writing streams
  (`--threadsCount`); `chunkNumber`: at most MAX_CHUNK_NUMBER, 10^9 messages in one stream (10^12
  rows at the default `--chunkSize` of 1000). Numbers below 1 are not refused here: a writer
  numbering from 0 would send them, and the completeness ledger reports their increment
  incomplete (it never becomes complete without them);
- timestamps (backup key `deltaDate`, change-stream event times): MIN_TIMESTAMP_US..MAX_TIMESTAMP_US,
  the years 0001..9999 that Python, Spark and Iceberg timestamps hold;
- longs (positions, sequence numbers, counters a format declares as a long, a DataWorks
  `sequenceId` of digits): 64-bit signed; a Qlik `changeSequence` (35 digits, beyond a long):
  at most MAX_SEQUENCE_DIGITS digits; a Datastream JSON payload integer: 64-bit (untyped, the
  lake lands it as bigint);
- JSON a codec reads: what `json.loads` refuses beyond syntax (an integer of more than 4300
  digits, nesting deeper than the recursion limit) is bad JSON (`json_text.BEYOND_LIMITS`).

Readers then never enumerate a claimed range: gaps are computed as ranges over what is present
(`resources.prostore.ranges`), so even numbers within these bounds cost O(messages).
"""

from __future__ import annotations

import datetime as dt
import re

MAX_DELTA_NUM = 1_000_000_000
MAX_STREAMS = 1_000_000
MAX_CHUNK_NUMBER = 1_000_000_000
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MAX_SEQUENCE_DIGITS = 64

_EPOCH = dt.datetime(1970, 1, 1)
MIN_TIMESTAMP_US = (dt.datetime.min - _EPOCH) // dt.timedelta(microseconds=1)
MAX_TIMESTAMP_US = (dt.datetime.max - _EPOCH) // dt.timedelta(microseconds=1)

# A long written as text: ASCII digits only (str.isdigit() also takes "²", which int() refuses),
# and no more than a long can hold (int() of a longer digit string is slow, then refused).
_LONG_TEXT = re.compile(r"-?[0-9]{1,19}")


def outside(value: int, low: int, high: int, what: str) -> str | None:
    """Why `value` cannot be `what` (a reason for the codec's error), or None when it fits."""
    if low <= value <= high:
        return None
    shown = str(value) if abs(value) < 10**30 else f"a number of {len(str(abs(value)))} digits"
    return f"{what} {shown} is outside {low}..{high}"


def long_from_text(text: str) -> int | None:
    """The long a decimal digit string holds, or None when it is not one (not ASCII digits, or
    outside the 64-bit range)."""
    text = text.strip()
    if not _LONG_TEXT.fullmatch(text):
        return None
    value = int(text)
    return value if LONG_MIN <= value <= LONG_MAX else None
