"""Change-stream sources whose deltas the platform seals: Qlik Replicate, DataWorks, Datastream."""
