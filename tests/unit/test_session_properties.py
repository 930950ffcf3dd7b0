"""The session-wide Iceberg snapshot properties a MERGE commits with: blocks asking for the same
shared properties hold them together (tables of one delta merged side by side), with own
properties keyed by their tables beside them; others wait, and the session's own settings come
back when the last block leaves. A dict stands in for the session's conf."""

import threading
import time

from resources.spark.iceberg_reads import recorded_property_sql
from resources.spark.session_properties import own_property, recorded_property, session_snapshot_properties

PREFIX = "spark.sql.iceberg.snapshot-property."


class _Conf:
    def __init__(self, **values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


class _Session:
    def __init__(self, **values):
        self.conf = _Conf(**values)


def _hold(spark, props, inside: list, seen: list, entered: threading.Event | None = None, stay=0.2, own=None):
    with session_snapshot_properties(spark, props, own):
        inside.append(1)
        seen.append((dict(spark.conf.values), len(inside)))
        if entered is not None:
            entered.set()
        time.sleep(stay)
        inside.pop()


def test_blocks_with_the_same_properties_hold_them_together_and_the_old_values_come_back():
    spark = _Session(**{PREFIX + "deltaport.delta": "3"})
    inside, seen = [], []
    threads = [threading.Thread(target=_hold, args=(spark, {"deltaport.delta": "7", "deltaport.commit-id": "c"},
                                                    inside, seen)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(n for _, n in seen) == 3  # all three at once
    assert all(values[PREFIX + "deltaport.delta"] == "7" for values, _ in seen)
    assert spark.conf.values == {PREFIX + "deltaport.delta": "3"}  # restored, the commit id unset


def test_a_block_with_other_properties_waits_for_the_holders_to_leave():
    spark = _Session()
    inside, seen, entered = [], [], threading.Event()
    first = threading.Thread(target=_hold, args=(spark, {"deltaport.delta": "1"}, inside, seen, entered))
    first.start()
    entered.wait(5)
    second = threading.Thread(target=_hold, args=(spark, {"deltaport.delta": "2"}, inside, seen, None, 0))
    second.start()
    first.join()
    second.join()
    assert [(values.get(PREFIX + "deltaport.delta"), n) for values, n in seen] == [("1", 1), ("2", 1)]
    assert spark.conf.values == {}


def test_blocks_with_own_properties_of_their_tables_hold_together_each_with_its_own():
    spark = _Session(**{PREFIX + "deltaport.delta": "3"})
    inside, seen = [], []
    shared = {"deltaport.delta": "7", "deltaport.commit-id": "c"}
    threads = [threading.Thread(target=_hold, args=(spark, shared, inside, seen), kwargs={
        "own": {own_property("deltaport.tombstones", f"lake.src.t{i}"): str(i)}}) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(n for _, n in seen) == 3  # all three at once, though their tombstones differ
    for i in range(3):  # each block saw its own table's count while it held
        assert any(values.get(PREFIX + f"deltaport.tombstones.src.t{i}") == str(i) for values, _ in seen)
    assert all(values[PREFIX + "deltaport.delta"] == "7" for values, _ in seen)
    assert spark.conf.values == {PREFIX + "deltaport.delta": "3"}  # every own key put back


def test_a_block_with_the_same_own_key_waits_for_the_holder_of_it():
    spark = _Session()
    inside, seen, entered = [], [], threading.Event()
    own = own_property("deltaport.keys", "lake.src.t")
    first = threading.Thread(target=_hold, args=(spark, {"deltaport.delta": "1"}, inside, seen, entered),
                             kwargs={"own": {own: '["a"]'}})
    first.start()
    entered.wait(5)
    second = threading.Thread(target=_hold, args=(spark, {"deltaport.delta": "1"}, inside, seen, None, 0),
                              kwargs={"own": {own: '["b"]'}})
    second.start()
    first.join()
    second.join()
    assert [(values.get(PREFIX + own), n) for values, n in seen] == [('["a"]', 1), ('["b"]', 1)]
    assert spark.conf.values == {}


def test_readers_take_the_tables_own_key_then_the_plain_name_of_older_commits():
    ident = "lake.src.orders"
    assert own_property("deltaport.keys", ident) == "deltaport.keys.src.orders"
    both = {"deltaport.keys": '["old"]', "deltaport.keys.src.orders": '["id"]', "deltaport.keys.src.other": '["x"]'}
    assert recorded_property(both, "deltaport.keys", ident) == '["id"]'
    assert recorded_property({"deltaport.keys": '["old"]'}, "deltaport.keys", ident) == '["old"]'
    assert recorded_property({"deltaport.keys.src.other": '["x"]'}, "deltaport.keys", ident) is None
    assert recorded_property_sql("deltaport.keys", "lake.it's.t") == (
        "coalesce(summary['deltaport.keys.it\\'s.t'], summary['deltaport.keys'])")
