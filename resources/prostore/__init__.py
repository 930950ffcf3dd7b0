"""Prostore's own pieces: the delta index of its backup and signal topics, completeness of a
backup increment, ingestion of the topics into the index, and `inspect`."""
