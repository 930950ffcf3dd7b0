"""The lake: how each source lands in Iceberg tables (layout, writes, snapshots)."""
