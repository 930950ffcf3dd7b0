"""The demo's object storage on loopback: an S3-compatible store (moto) and Iceberg's REST catalog
server in front of it, which `deltaport demo --lake s3` starts (and the tests, through
tests/support/objstore.py). A deployment brings its own store and catalog; nothing here runs in
one. The checks a lake on object storage needs are the lake's (`resources.lake.locations`)."""
