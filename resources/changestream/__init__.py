"""Change streams without a DELTA_CLOSE (Qlik, DataWorks, Datastream): sealing their deltas and
the ledger that keeps each delta's offsets for good."""
