"""The Dagster IO managers that load a delta's slice of a topic as an asset input: Prostore's
backup and signal topics (`prostore`), the sealed change streams (`streams`), and what both read
from the consuming step (`inputs`). They sit above the Kafka client layer (`resources.kafka`) and
the source kinds' engines (`resources.prostore`, `resources.changestream`), which know nothing of
Dagster's inputs."""
