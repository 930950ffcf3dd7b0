"""Kafka as a Dagster resource: where the broker is and how to talk to it.

`bootstrap()` resolves the broker when a client is built, never at import: the configured
servers, else $KAFKA_BOOTSTRAP_SERVERS, else the embedded broker that `deltaport broker start`
recorded. Secrets never sit in config: `secret_properties` maps a librdkafka property to the
name of the environment variable that holds its value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from resources.errors import DeltaportError


class KafkaResource(dg.ConfigurableResource):
    """Connection settings for confluent-kafka clients (consumers, producers, admin)."""

    bootstrap_servers: str | None = Field(
        default=None,
        description="host:port[,host:port]. Empty: $KAFKA_BOOTSTRAP_SERVERS, else the embedded broker "
        "recorded in <state_dir>/broker.json by `deltaport broker start`.",
    )
    properties: dict[str, str] = Field(
        default_factory=dict, description="Any librdkafka property (security.protocol, sasl.mechanism, ...)."
    )
    secret_properties: dict[str, str] = Field(
        default_factory=dict,
        description="librdkafka property -> name of the environment variable holding its value "
        "(e.g. sasl.password: KAFKA_PASSWORD); read when a client is built.",
    )
    timeout_seconds: float = Field(default=30.0, description="Timeout of every Kafka call, in seconds.")
    state_dir: str = Field(default=".deltaport", description="Where `deltaport broker start` records its address.")

    def bootstrap(self) -> str:
        if self.bootstrap_servers:
            return self.bootstrap_servers
        if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
            return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        state = Path(self.state_dir) / "broker.json"
        if state.exists():
            return json.loads(state.read_text())["bootstrap_servers"]
        raise DeltaportError("no Kafka broker configured: set kafka.bootstrap_servers in deltaport.yaml, "
                             "or $KAFKA_BOOTSTRAP_SERVERS, or run `deltaport broker start`")

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for any client, secrets resolved now (not bootstrap.servers)."""
        conf = dict(self.properties)
        for prop, env in self.secret_properties.items():
            if env not in os.environ:
                raise DeltaportError(f"Kafka property {prop!r} needs environment variable {env}, which is not set")
            conf[prop] = os.environ[env]
        return conf
