"""What the MERGEs' key filters came to in a test: `recorded_key_filters` wraps
`merge_keys.target_key_filter` where `iceberg_merge.narrow_to_changed_keys` calls it (the one path
every key filter takes: a datamart's, a change stream's stored-rows scan and MERGE) and returns
the list each answer is appended to (SQL text, or None for no filter)."""

from __future__ import annotations


def recorded_key_filters(monkeypatch) -> list:
    from resources.spark import iceberg_merge

    made: list = []
    real = iceberg_merge.target_key_filter

    def recorded(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(iceberg_merge, "target_key_filter", recorded)
    return made
