"""Increment completeness from backup keys: numberings, holes, duplicates, re-exports, gaps;
numbers as large as a key can claim cost the messages seen, not the span they claim."""

from __future__ import annotations

import itertools
import json

import pytest

from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, MESSAGE_TYPE_DATA, BackupKey
from resources.prostore.completeness import IncrementLedger

DATE = 1638360336000000
CL = None  # tableName of changelog messages


def key(stream, chunk, table="sales", last=False, *, inc="inc-1", delta=1, total=1,
        datamart="marketing", date=DATE) -> BackupKey:
    message_type = MESSAGE_TYPE_CHANGELOG if table is None else MESSAGE_TYPE_DATA
    return BackupKey(inc, message_type, datamart, delta, date, table, stream, total, chunk, last)


class Topic:
    """Feeds keys to a ledger as a topic would: increasing offsets per partition and times."""

    def __init__(self):
        self.ledger = IncrementLedger()
        self.offsets = {}
        self.clock = itertools.count(1_700_000_000_000, 1000)

    def send(self, *keys, partition=0, timestamp_ms=None):
        results = []
        for k in keys:
            offset = self.offsets.get(partition, 0)
            self.offsets[partition] = offset + 1
            ts = next(self.clock) if timestamp_ms is None else timestamp_ms
            results.append(self.ledger.add(k, partition, offset, ts))
        return results

    def increment(self, datamart="marketing", delta=1, inc="inc-1"):
        report = self.ledger.report().datamarts[datamart].deltas[delta]
        return next(i for i in report.increments if i.increment_id == inc)


def whole(inc="inc-1", delta=1, datamart="marketing", **kw):
    """A complete one-stream increment: one data chunk and the changelog (per-stream numbering)."""
    common = dict(inc=inc, delta=delta, datamart=datamart, **kw)
    return [key(1, 1, "sales", **common), key(1, 2, CL, True, **common)]


# --- Complete increments ------------------------------------------------------------------------


def test_one_stream_one_chunk():
    topic = Topic()
    topic.send(key(1, 1, CL, True))  # a delta without data changes: only the changelog
    inc = topic.increment()
    assert inc.complete and inc.reasons == []
    assert (inc.messages, inc.duplicates, inc.stream_total, inc.tables) == (1, 0, 1, [])
    assert inc.offsets == {0: (0, 0)}
    delta = topic.ledger.report().datamarts["marketing"].deltas[1]
    assert delta.complete and delta.chosen == "inc-1" and delta.delta_date == DATE


def test_one_data_chunk_without_changelog_is_incomplete():
    topic = Topic()
    topic.send(key(1, 1, "sales", True))
    inc = topic.increment()
    assert not inc.complete
    assert inc.reasons == ["no changelog"]
    assert topic.ledger.report().datamarts["marketing"].deltas[1].chosen is None


def test_multi_stream_multi_table_numbered_per_stream():
    topic = Topic()
    topic.send(
        key(1, 1, "sales", total=2), key(2, 1, "stores", total=2),
        key(1, 2, "sales", total=2), key(2, 2, "stores", total=2),
        key(1, 3, "goods", True, total=2), key(2, 3, CL, True, total=2),
    )
    inc = topic.increment()
    assert inc.complete, inc.reasons
    assert inc.tables == ["goods", "sales", "stores"]
    assert inc.stream_total == 2 and inc.messages == 6


def test_multi_stream_multi_table_numbered_per_table():
    topic = Topic()
    topic.send(
        key(1, 1, "sales", total=2), key(1, 2, "sales", total=2), key(1, 1, "goods", True, total=2),
        key(2, 1, "stores", total=2), key(2, 2, "stores", True, total=2), key(2, 1, CL, total=2),
    )
    inc = topic.increment()
    assert inc.complete, inc.reasons
    assert inc.holes == {}


def test_arrival_order_does_not_matter():
    stream_1 = [key(1, n, "sales", n == 4, total=2) for n in (4, 2, 1, 3)]
    topic = Topic()
    topic.send(*stream_1[:2], partition=1)
    topic.send(key(2, 1, CL, True, total=2), *stream_1[2:], partition=0)
    inc = topic.increment()
    assert inc.complete, inc.reasons
    assert inc.offsets == {0: (0, 2), 1: (0, 1)}


def test_duplicates_are_counted_and_ignored():
    topic = Topic()
    keys = whole()
    assert topic.send(*keys) == [True, True]
    assert topic.send(keys[0], partition=2) == [False]  # a retry, landed in another partition
    assert topic.send(*keys) == [False, False]
    inc = topic.increment()
    assert inc.complete
    assert (inc.messages, inc.duplicates) == (2, 3)
    assert inc.offsets == {0: (0, 3), 2: (0, 0)}  # the range covers every copy


# --- Incomplete increments ----------------------------------------------------------------------


def test_lost_chunk_per_stream_numbering():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, 2, "sales"), key(1, 4, "goods", True))
    inc = topic.increment()
    assert not inc.complete
    assert inc.holes == {"stream 1": [(3, 3)]}
    assert inc.reasons == ["holes in stream 1: chunks 3"]


def test_lost_chunk_per_table_numbering():
    topic = Topic()
    topic.send(
        key(1, 1, CL), key(1, 1, "sales"), key(1, 2, "sales"),
        key(1, 1, "goods"), key(1, 3, "goods"), key(1, 5, "goods", True),
    )
    inc = topic.increment()
    assert inc.holes == {"stream 1 / table goods": [(2, 2), (4, 4)]}
    assert inc.reasons == ["holes in stream 1 / table goods: chunks 2, 4"]


def test_lost_first_chunk_of_changelog_group_is_named():
    topic = Topic()
    topic.send(key(1, 1, "sales"), key(1, 2, "sales", True), key(1, 2, CL))
    inc = topic.increment()
    assert inc.holes == {"stream 1 / changelog": [(1, 1)]}


def test_missing_stream():
    topic = Topic()
    topic.send(key(1, 1, CL, True, total=3), key(3, 1, "sales", True, total=3))
    inc = topic.increment()
    assert inc.missing_streams == [(2, 2)]
    assert inc.reasons == ["missing streams: 2"]


def test_no_last_chunk():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, 2, "sales"), key(1, 3, "sales"))
    inc = topic.increment()
    assert inc.holes == {}
    assert inc.reasons == ["stream 1: no last chunk seen"]


def test_last_chunk_flag_below_the_highest_chunk():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, 2, "sales", True), key(1, 3, "sales"))
    assert topic.increment().reasons == [
        "stream 1: isLastChunk on chunk 2 is not on the highest chunk (3)"
    ]


def test_last_chunk_flag_below_the_highest_chunk_of_every_table():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, 1, "sales", True), key(1, 2, "sales"))
    assert topic.increment().reasons == [
        "stream 1: isLastChunk on chunk 1 is not the highest chunk of any table"
    ]


def test_inconsistent_stream_total_and_delta_date():
    topic = Topic()
    topic.send(key(1, 1, CL, True, total=1), key(2, 1, "sales", True, total=2, date=DATE + 1))
    inc = topic.increment()
    assert inc.reasons == [
        "inconsistent streamTotal: 1, 2",
        f"inconsistent deltaDate: {DATE}, {DATE + 1}",
    ]
    assert inc.stream_total == 2 and inc.delta_date == DATE


def test_stream_number_outside_stream_total():
    topic = Topic()
    topic.send(*whole(), key(2, 1, "sales", True))
    assert topic.increment().reasons == ["stream numbers outside 1..1: 2"]


def test_chunk_number_below_one():
    topic = Topic()
    topic.send(key(1, 0, "sales"), key(1, 1, CL, True))
    assert topic.increment().reasons == ["stream 1: chunk numbers below 1: 0"]


def test_same_chunk_with_and_without_last_flag():
    topic = Topic()
    topic.send(*whole(), key(1, 2, CL, False))
    inc = topic.increment()
    assert inc.messages == 3 and inc.duplicates == 0
    assert inc.reasons == ["stream 1 / changelog chunk 2 seen both with and without isLastChunk"]


def test_several_reasons_at_once():
    topic = Topic()
    topic.send(key(1, 2, "sales", total=2))
    inc = topic.increment()
    assert inc.reasons == [
        "missing streams: 2",
        "holes in stream 1: chunks 1",
        "stream 1: no last chunk seen",
        "no changelog",
    ]


# --- Choosing among re-exports ------------------------------------------------------------------


def test_reexport_older_incomplete_chooses_the_complete_one():
    topic = Topic()
    topic.send(key(1, 1, "sales", inc="zzz-old"))  # an export that died after one chunk
    topic.send(*whole(inc="aaa-new"))
    delta = topic.ledger.report().datamarts["marketing"].deltas[1]
    assert [i.increment_id for i in delta.increments] == ["zzz-old", "aaa-new"]
    assert delta.chosen == "aaa-new"
    assert delta.chosen_increment.complete


def test_reexport_newer_incomplete_keeps_the_older_complete_one():
    topic = Topic()
    topic.send(*whole(inc="old"))
    topic.send(key(1, 1, "sales", inc="new"))
    delta = topic.ledger.report().datamarts["marketing"].deltas[1]
    assert delta.chosen == "old"


def test_reexport_both_complete_chooses_the_latest_not_a_union():
    topic = Topic()
    topic.send(*whole(inc="bbb"))
    topic.send(*whole(inc="aaa", date=DATE + 5))
    topic.send(whole(inc="bbb")[0])  # a late duplicate of the older run makes it the latest
    delta = topic.ledger.report().datamarts["marketing"].deltas[1]
    assert delta.chosen == "bbb"
    assert delta.delta_date == DATE
    topic.send(whole(inc="aaa", date=DATE + 5)[1])
    delta = topic.ledger.report().datamarts["marketing"].deltas[1]
    assert delta.chosen == "aaa" and delta.delta_date == DATE + 5


def test_reexport_ties_broken_by_partition_offset_then_id():
    topic = Topic()
    topic.send(*whole(inc="x"), partition=0, timestamp_ms=5)
    topic.send(*whole(inc="y"), partition=1, timestamp_ms=5)
    assert topic.ledger.report().datamarts["marketing"].deltas[1].chosen == "y"

    ledger = IncrementLedger()
    for inc in ("b", "a"):
        for k in whole(inc=inc):
            ledger.add(k, 0, 7, 5)
    assert ledger.report().datamarts["marketing"].deltas[1].chosen == "b"


# --- Datamarts and deltas -----------------------------------------------------------------------


def test_missing_deltas_between_first_and_last():
    topic = Topic()
    for delta in (7, 2, 5, 3):
        topic.send(*whole(delta=delta))
    topic.send(key(1, 1, "sales", delta=8))  # present, not complete, not missing
    datamart = topic.ledger.report().datamarts["marketing"]
    assert datamart.present == [2, 3, 5, 7, 8]
    assert datamart.missing_deltas == [(4, 4), (6, 6)]
    assert datamart.complete == [2, 3, 5, 7]
    assert datamart.incomplete == [8]
    assert list(datamart.deltas) == [2, 3, 5, 7, 8]


def test_several_datamarts_interleaved():
    topic = Topic()
    sales_1, hr_0, sales_2, hr_1 = (
        whole(datamart="sales", delta=1, inc="s1"), whole(datamart="кадры", delta=0, inc="h0"),
        whole(datamart="sales", delta=2, inc="s2"), whole(datamart="кадры", delta=1, inc="h1"),
    )
    for i, messages in enumerate(zip(sales_1, hr_0, sales_2, hr_1)):
        topic.send(*messages, partition=i % 2)
    topic.send(key(1, 1, "t", True, datamart="sales", delta=4, inc="s4"))
    report = topic.ledger.report()
    assert list(report.datamarts) == ["sales", "кадры"]
    sales, hr = report.datamarts["sales"], report.datamarts["кадры"]
    assert (sales.complete, sales.incomplete, sales.missing_deltas) == ([1, 2], [4], [(3, 3)])
    assert (hr.complete, hr.incomplete, hr.missing_deltas) == ([0, 1], [], [])
    assert hr.deltas[0].chosen == "h0" and sales.deltas[2].chosen == "s2"


def test_incremental_id_spans_deltas_of_a_range_export():
    topic = Topic()
    topic.send(*whole(inc="run", delta=1), *whole(inc="run", delta=2))
    datamart = topic.ledger.report().datamarts["marketing"]
    assert datamart.complete == [1, 2]
    assert datamart.deltas[2].increments[0].messages == 2


def test_report_while_streaming_and_single_delta_lookup():
    topic = Topic()
    first, last = whole()
    topic.send(first)
    assert not topic.ledger.delta_report("marketing", 1).complete
    topic.send(last)
    assert topic.ledger.delta_report("marketing", 1).complete
    assert topic.ledger.delta_report("marketing", 2) is None
    assert topic.ledger.delta_report("other", 1) is None
    assert IncrementLedger().report().datamarts == {}


# --- JSON output --------------------------------------------------------------------------------


def test_to_dict_is_json():
    topic = Topic()
    topic.send(*whole(delta=1))
    topic.send(key(1, 1, CL, delta=3), key(1, 3, "sales", True, delta=3), partition=1)
    out = json.loads(json.dumps(topic.ledger.report().to_dict()))
    (datamart,) = out["datamarts"]
    assert datamart["datamart"] == "marketing"
    assert datamart["missing_deltas"] == [[2, 2]]
    assert (datamart["complete"], datamart["incomplete"]) == ([1], [3])
    delta_3 = datamart["deltas"][1]
    assert delta_3["delta_num"] == 3 and delta_3["complete"] is False and delta_3["chosen"] is None
    (inc,) = delta_3["increments"]
    assert inc["holes"] == {"stream 1": [[2, 2]]}
    assert inc["offsets"] == {"1": [0, 1]}
    assert inc["reasons"] == ["holes in stream 1: chunks 2"]
    assert set(inc) == {
        "increment_id", "complete", "stream_total", "delta_date", "messages", "duplicates",
        "tables", "missing_streams", "holes", "reasons", "offsets", "last_timestamp_ms",
    }


@pytest.mark.parametrize("total", [1, 3])
def test_many_streams_many_chunks(total):
    topic = Topic()
    keys = []
    for stream in range(1, total + 1):
        tables = [f"t{stream}_{n}" for n in range(3)]
        chunk = itertools.count(1)
        for table in tables:
            keys += [key(stream, next(chunk), table, total=total) for _ in range(4)]
        keys.append(key(stream, next(chunk), CL, True, total=total))
    topic.send(*reversed(keys))
    inc = topic.increment()
    assert inc.complete, inc.reasons
    assert inc.messages == 13 * total and len(inc.tables) == 3 * total


# --- Numbers a key may claim --------------------------------------------------------------------
# Each of these enumerated every number below the claim before (2^63 of them: memory grew past
# 3 GB in seconds). Now gaps are ranges, computed from the numbers present.

BIG = 2**63 - 1


def test_a_huge_last_chunk_number_is_one_range_of_holes():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, BIG, "sales", True))
    inc = topic.increment()
    assert inc.holes == {"stream 1": [(2, BIG - 1)]}
    assert inc.reasons == [f"holes in stream 1: chunks 2..{BIG - 1} ({BIG - 2} in all)"]


def test_a_huge_chunk_number_per_table_numbering():
    topic = Topic()
    topic.send(key(1, 1, CL), key(1, 1, "sales"), key(1, BIG, "sales", True))
    assert topic.increment().holes == {"stream 1 / table sales": [(2, BIG - 1)]}


def test_a_huge_stream_total_is_one_range_of_missing_streams():
    topic = Topic()
    topic.send(key(1, 1, CL, True, total=BIG))
    inc = topic.increment()
    assert inc.missing_streams == [(2, BIG)]
    assert inc.reasons == [f"missing streams: 2..{BIG} ({BIG - 1} in all)"]


def test_huge_and_negative_numbers_everywhere_stay_cheap():
    topic = Topic()
    topic.send(*whole(delta=0), *whole(delta=BIG))
    topic.send(key(-BIG, -BIG, "sales", True, total=-BIG, delta=BIG, inc="junk"))
    datamart = topic.ledger.report().datamarts["marketing"]
    assert datamart.missing_deltas == [(1, BIG - 1)]
    junk = topic.increment(delta=BIG, inc="junk")
    assert junk.missing_streams == []
    assert junk.reasons[0] == f"stream numbers outside 1..{-BIG}: {-BIG}"


def test_printed_holes_are_capped():
    topic = Topic()
    topic.send(key(1, 1, CL), *(key(1, n, "sales") for n in range(3, 42, 2)), key(1, 42, "sales", True))
    inc = topic.increment()
    assert len(inc.holes["stream 1"]) == 20  # all kept, as ranges
    assert inc.reasons == ["holes in stream 1: chunks 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, "
                           "... and 10 more ranges (20 in all)"]


def test_printed_conflicts_are_capped():
    topic = Topic()
    for n in range(1, 31):
        topic.send(key(1, n, "sales", True), key(1, n, "sales", False))
    reasons = topic.increment().reasons
    conflicts = [r for r in reasons if "isLastChunk" in r]
    assert len(conflicts) == 11 and conflicts[-1] == "... and 20 more chunks seen both with and without isLastChunk"
