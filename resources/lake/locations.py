"""Which locations are object storage: schemes whose stores have no atomic rename and no real
folders, so a Hadoop catalog must not commit there (platform_assets/lake_safety.py) and files
are found by listing a key prefix (resources/lake/maintenance.py's orphan pass)."""

from __future__ import annotations

__all__ = ["OBJECT_STORE_SCHEMES", "is_object_store"]

OBJECT_STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "obs")


def is_object_store(location: str | None) -> bool:
    """Whether `location` (``s3://bucket/key``, a folder, ``file:/...``) is on object storage."""
    return bool(location) and "://" in location and location.split("://", 1)[0].lower() in OBJECT_STORE_SCHEMES
