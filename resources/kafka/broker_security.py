"""SASL_SSL (SCRAM-SHA-512) and ACLs for the embedded broker: what a secured production cluster
looks like to a client, on one machine (the security cases of the fault suite and its tests).

What flows through: a `BrokerSecurity` (users and their passwords, kept in memory only) goes in;
out come the broker's listener/authorizer properties, a self-signed certificate for 127.0.0.1
(keytool, from the JDK the broker runs on) with the CA file clients trust, the users' SCRAM
credentials for the storage format, and the librdkafka settings of any user.
Guarantees: the client listener accepts only TLS + SCRAM; with `acls`, a user reads only what an
ACL grants (`allow.everyone.if.no.acl.found=false`), the admin user is the only super user
besides the broker's own controller link (loopback PLAINTEXT, controller requests only).
Passwords go to the broker in files readable by the owner only (0600) and the format tool's
argument list; never to a log line.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
LISTENER = "SASL_SSL"


@dataclass(frozen=True)
class BrokerSecurity:
    """Users (name -> password) of a SASL_SSL broker; `admin` is its super user and the broker's
    own inter-broker identity. Passwords are generated when not given."""

    users: Mapping[str, str] = field(default_factory=dict)
    admin: str = "admin"
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    acls: bool = True

    def __repr__(self) -> str:  # never the passwords
        return f"BrokerSecurity(users={sorted(self.users)}, admin={self.admin!r}, acls={self.acls})"

    def all_users(self) -> dict[str, str]:
        return {self.admin: self.admin_password, **dict(self.users)}

    def client_config(self, ca_file: Path, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings for `user` (default: the admin) with its password (or `password`)."""
        user = user or self.admin
        return {"security.protocol": LISTENER, "sasl.mechanism": MECHANISM, "ssl.ca.location": str(ca_file),
                "sasl.username": user,
                "sasl.password": password if password is not None else self.all_users()[user]}


def write_tls(folder: Path, java: str) -> tuple[Path, Path, str]:
    """A self-signed certificate for 127.0.0.1/localhost: (keystore.p12, ca.pem, store password).
    The broker's truststore is the keystore itself (it trusts its own certificate)."""
    keytool = str(Path(java).with_name("keytool"))
    folder.mkdir(parents=True, exist_ok=True)
    store, ca, password = folder / "broker.p12", folder / "ca.pem", secrets.token_urlsafe(18)
    common = ["-keystore", str(store), "-storetype", "PKCS12", "-storepass", password]
    for args in (["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "30",
                  "-dname", "CN=localhost", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-keypass", password],
                 ["-exportcert", "-rfc", "-alias", "broker", "-file", str(ca)]):
        done = subprocess.run([keytool, *args, *common], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"keytool {args[0]} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    os.chmod(store, 0o600)
    return store, ca, password


def server_properties(security: BrokerSecurity, broker_port: int, controller_port: int,
                      keystore: Path, store_password: str) -> dict[str, str]:
    """The broker settings that replace the PLAINTEXT client listener with SASL_SSL."""
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{security.admin}" password="{security.admin_password}";')
    props = {
        "listeners": f"{LISTENER}://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"{LISTENER}://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "inter.broker.listener.name": LISTENER,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{LISTENER}:{LISTENER}",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": store_password,
        "ssl.key.password": store_password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(keystore),
        "ssl.truststore.password": store_password,
        "ssl.endpoint.identification.algorithm": "https",
    }
    if security.acls:
        props.update({
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The broker reaches its controller over the loopback PLAINTEXT controller listener,
            # as User:ANONYMOUS; that listener serves controller requests only.
            "super.users": f"User:{security.admin};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })
    return props


def format_arguments(security: BrokerSecurity) -> list[str]:
    """`kafka-storage format` arguments that create every user's SCRAM credential (KRaft: the
    broker's own login must exist before it starts)."""
    args: list[str] = []
    for user, password in security.all_users().items():
        args += ["--add-scram", f"{MECHANISM}=[name={user},password={password}]"]
    return args


def grant_read(bootstrap: str, admin_config: Mapping[str, str], user: str, topic_prefix: str,
               timeout: float = 30.0) -> None:
    """Let `user` read (READ, DESCRIBE) every topic whose name starts with `topic_prefix`."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)

    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_config})
    bindings = [AclBinding(ResourceType.TOPIC, topic_prefix, ResourcePatternType.PREFIXED, f"User:{user}", "*",
                           operation, AclPermissionType.ALLOW)
                for operation in (AclOperation.READ, AclOperation.DESCRIBE)]
    for future in admin.create_acls(bindings, request_timeout=timeout).values():
        future.result(timeout=timeout)
