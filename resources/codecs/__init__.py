"""Wire codecs: pure functions from bytes to typed records and back. No Dagster, no Kafka client."""
