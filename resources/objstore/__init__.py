"""Object storage for the lake: an S3-compatible store and an Iceberg REST catalog on loopback
(tests, demo profiles), and what checks a lake on object storage needs."""
