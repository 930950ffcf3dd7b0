"""Spark with Apache Iceberg: Maven-resolved jars (`jars`), the session builder (`session`), the
Dagster resource (`resource`) and table helpers for delta commits (`iceberg`)."""
