"""What every source shares, whatever its format: its deltas as Dagster partitions (`partitions`:
one partition per delta, a run covers one delta or a range of consecutive ones) and how due
deltas become runs, one source's run at a time (`requests`). A source format's own assets and
sensor (`platform_assets.prostore`, `platform_assets.streams`) build on these."""
