"""The change-stream increment's completeness check (pure: from what the run read, decoded and
landed; no Spark). It names every delta that read fewer messages than were sealed, or whose
landed row changes (before-images aside) differ from the decoded ones."""

from __future__ import annotations

from types import SimpleNamespace

from platform_assets.streams.checks import increment_checks
from resources.lake.cdc import CdcLandStats


def _slice(n: int, messages: int, rows: int):
    return SimpleNamespace(delta_num=n, delta=SimpleNamespace(messages=messages, rows=rows))


def test_every_delta_complete_passes_and_before_images_do_not_count():
    (result,) = increment_checks([
        (_slice(1, 5, 7), 5, {"a": 4, "b": 3}, [CdcLandStats("a", 6, 3, 1, 2), CdcLandStats("b", 3, 3, 0, 0)]),
        (_slice(2, 2, 0), 2, {}, []),
    ])
    assert result.passed
    assert result.metadata["rows_landed"].value == {"a": 4, "b": 3}
    assert result.metadata["incomplete_deltas"].value == []


def test_a_short_read_or_a_row_count_that_differs_names_its_delta():
    (result,) = increment_checks([
        (_slice(1, 5, 7), 4, {"a": 7}, [CdcLandStats("a", 7, 7, 0, 0)]),  # a message not read
        (_slice(2, 3, 3), 3, {"a": 3}, [CdcLandStats("a", 3, 3, 0, 0)]),
        (_slice(3, 3, 3), 3, {"a": 3}, [CdcLandStats("a", 2, 2, 0, 0)]),  # a row change missing
    ])
    assert not result.passed
    assert result.metadata["incomplete_deltas"].value == [1, 3]
