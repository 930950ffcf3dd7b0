"""resources/lake/as_of.py: which state answers "as of delta N" once untouched tables get no tag."""

import pytest

from resources.lake.as_of import (Absent, Current, DeltaNotLandedError, FromFold, FromHistory, FromTag,
                                  resolve_as_of, source_landed, tags_to_expire)

TAGS = {3: "s3", 7: "s7", 12: "s12"}  # a table changed in deltas 3, 7 and 12 only


def resolve(n, **kw):
    args = dict(landed=20, recorded=12, tags=TAGS, folds=(), history_from=None) | kw
    return resolve_as_of(n, **args)


def test_exact_tag_and_between_tags():
    assert resolve(7) == FromTag(7, "s7")
    assert resolve(8) == FromTag(7, "s7")
    assert resolve(11) == FromTag(7, "s7")
    assert resolve(3) == FromTag(3, "s3")


def test_before_the_first_tag_is_absent_and_no_record_is_absent():
    assert resolve(2) == Absent()
    assert resolve(0) == Absent()
    assert resolve(5, recorded=None, tags={}) == Absent()


def test_at_or_after_the_newest_record_is_the_table_as_it_is():
    assert resolve(12) == Current()
    assert resolve(20) == Current()


def test_not_landed_is_refused_even_when_the_table_has_a_record():
    with pytest.raises(DeltaNotLandedError, match="delta 21 has not landed"):
        resolve(21)
    with pytest.raises(DeltaNotLandedError):
        resolve(1, landed=None)


def test_a_run_in_flight_is_never_read_below_its_commit():
    # R = 22 > L = 20: the commit of delta 22 is not landed; as of 20 is the tag before it.
    tags = TAGS | {22: "s22"}
    assert resolve(20, recorded=22, tags=tags) == FromTag(12, "s12")
    with pytest.raises(DeltaNotLandedError):
        resolve(22, recorded=22, tags=tags)


def test_inside_a_fold_comes_before_the_tag_below_it():
    # deltas 8-12 folded into one commit tagged delta_12
    folds = [(8, 9, 10, 11, 12)]
    assert resolve(9, folds=folds) == FromFold((8, 9, 10, 11, 12))
    assert resolve(11, folds=folds) == FromFold((8, 9, 10, 11, 12))
    assert resolve(12, folds=folds) == Current()
    assert resolve(7, folds=folds) == FromTag(7, "s7")


def test_history_answers_before_tags_even_an_expired_one():
    # history from delta 5: as of n >= 4 comes from it, whether a tag is there or expired
    assert resolve(7, history_from=5) == FromHistory(12)
    assert resolve(4, history_from=5, tags={12: "s12"}) == FromHistory(12)
    assert resolve(3, history_from=5) == FromTag(3, "s3")


def test_an_old_lake_tagged_every_delta_reads_each_tag():
    tags = {n: f"s{n}" for n in range(1, 11)}
    landed = source_landed(None, 10)
    assert landed == 10
    for n in range(1, 10):
        assert resolve_as_of(n, landed=landed, recorded=10, tags=tags) == FromTag(n, f"s{n}")
    assert source_landed(14, 10) == 14


def test_expiry_keeps_the_newest_tag_at_or_below_every_delta_the_history_does_not_answer():
    tags = [1, 3, 7, 12, 19]
    # no history: nothing goes
    assert tags_to_expire(tags, landed=30, keep_tags=3, history_from=None) == []
    # history from 6: tags from 5 on may go, below m* = newest tag <= 27 (19): 7 and 12
    assert tags_to_expire(tags, landed=30, keep_tags=3, history_from=6) == [7, 12]
    # the newest tag always stays, and tags the history does not answer (1, 3) stay
    assert tags_to_expire(tags, landed=19, keep_tags=0, history_from=1) == [1, 3, 7, 12]
    # keep_tags counts from L, not from the table's newest tag
    assert tags_to_expire(tags, landed=21, keep_tags=3, history_from=1) == [1, 3, 7]
    assert tags_to_expire(tags, landed=2, keep_tags=3, history_from=1) == []
