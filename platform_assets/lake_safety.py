"""Combinations of `lake:` keys that would lose data or leak a secret, refused when deltaport.yaml
is read, each with one message naming the key to change (`platform_assets.config_error.ConfigError`).

What flows through: the parsed `lake:` block goes in; nothing comes out but the refusal.

* A Hadoop catalog (`type: hadoop`) on object storage (an ``s3://``, ``s3a://``, ``gs://``,
  ``abfs://``, ... warehouse). Its commit writes ``v<N+1>.metadata.json`` and relies on a rename
  that fails when the file exists; object stores have no atomic rename (a copy and a delete, or a
  PUT that overwrites), so two writers, or a commit retried after a timeout, can both "win" and
  one commit is silently lost. Iceberg's docs say the same: a Hadoop catalog needs a file system
  with atomic rename. A catalog service commits atomically wherever the files are.
* A secret written in the file: a property whose name says it holds a secret (a password, a
  secret key, a session token, a credential, a token) must be ``{env: NAME}``, read when a
  client is built; and ``{env: ...}`` must name one variable.
"""

from __future__ import annotations

from typing import Any

from platform_assets.config_error import ConfigError
from resources.lake.locations import is_object_store

__all__ = ["SECRET_SUFFIXES", "check_lake"]

# The last dot-separated part of a property's name that marks a secret (s3.secret-access-key,
# jdbc.password, credential, token, gcs.oauth2.token, s3.session-token, client.secret-access-key).
SECRET_SUFFIXES = ("secret-access-key", "session-token", "password", "credential", "token")


def check_lake(lake: Any, file: str | None) -> None:
    """Raise `ConfigError` naming the key of the first unsafe combination in `lake` (a LakeConfig)."""
    if lake.type == "hadoop" and is_object_store(lake.warehouse):
        scheme = lake.warehouse.split("://", 1)[0]
        raise ConfigError("lake.type", f"a hadoop catalog cannot live on object storage (warehouse "
                                       f"{lake.warehouse!r}): its commits rely on an atomic rename, which "
                                       f"{scheme}:// does not have, so concurrent or retried commits can be lost; "
                                       f"use a catalog service (type: rest, jdbc or hive) with this warehouse", file)
    for key, value in lake.properties.items():
        path = f"lake.properties.{key}"
        if isinstance(value, dict):
            if set(value) != {"env"} or not isinstance(value["env"], str) or not value["env"]:
                raise ConfigError(path, f"must be a value or {{env: NAME}} (the variable holding it), got {value!r}",
                                  file)
        elif str(key).rsplit(".", 1)[-1].lower() in SECRET_SUFFIXES:
            raise ConfigError(path, "holds a secret: give it as {env: NAME} (the variable holding it), "
                                    "never in the file", file)
