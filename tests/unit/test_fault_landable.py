"""The fault suite's lake-level check (bench/fault_stories.unlandable): a change-stream message the codec
accepts but whose values the lake could not land beside the good ones is found and named."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from bench.fault_stories import fault_story, unlandable
from bench.faults import mix


def test_an_accepted_message_whose_value_fits_no_column_type_is_found():
    story = fault_story("datastream", 7)
    rng = random.Random(1)
    items = mix(story, 0, rng, duplicates=3)
    assert unlandable("datastream", items, set()) == []  # the story and exact copies land
    src = next(m for m in story if m.value and isinstance(json.loads(m.value)["payload"].get("id"), int))
    doc = json.loads(src.value)
    doc["payload"]["id"] = "not a number"  # valid JSON, a string in a column of longs
    items.append((replace(src), json.dumps(doc).encode(), "wrong_type", False))
    found = unlandable("datastream", items, set())
    assert [offset for offset, _ in found] == [len(items) - 1] and "'id'" in found[0][1]
    assert unlandable("datastream", items, {len(items) - 1}) == []  # quarantined: not the lake's to land
