"""The platform's security, when the topology turns it on: who is who, the certificates and
passwords that prove it, and the properties that make every node and client use them.

Theory of operation
-------------------
One local CA per platform (state directory `pki/`) signs a certificate for every node and one
for each platform user. Certificates name their holder in the common name, and every node maps
a certificate's subject to that name (`ssl.principal.mapping.rules`), so:

    node certificate  CN=node.<cluster>   ->  User:node.<cluster>   a super user of its cluster
    admin certificate CN=<admin user>     ->  User:<admin user>     a super user of every cluster
    mirror            SCRAM <mirror user> ->  User:<mirror user>    the ACLs its links need
    gateways          SCRAM seaway-gateway ->  User:seaway-gateway  ClusterAction (to forward each
                                                                    client's request as the client's,
                                                                    in an Envelope) and reading
                                                                    `__seaway_dr`, on the DR pairs'
                                                                    clusters; nothing else

Each broker has four kinds of listener:

    CLIENT      SASL_SSL, SCRAM     clients of its own region
    WAN_<R>     SASL_SSL, SCRAM     clients of region R, through the WAN proxy (TLS passes
                                    through the proxy unchanged)
    INTERNAL    SSL, mTLS           replication between the cluster's brokers
    CONTROLLER  SSL, mTLS           the quorum and the brokers' controller channel

Node-to-node connections prove themselves with the node certificate; a node of another
cluster, with a certificate of the same CA, is a principal nobody granted anything. ACLs are
on (`allow.everyone.if.no.acl.found=false`), so everything else is denied until granted.

A gateway (regions/gateways.py) listens with TLS (a certificate of its own, for the host its
clients connect to) and SCRAM, relaying each client's login to the brokers, so clients use the
same client properties through it as directly; it keeps no client's password.

SCRAM credentials for the admin, mirror and gateway users are written into each cluster's metadata log
when its storage is formatted (`storage format --add-scram`), so they work from the first
start. Passwords are made once and kept in `secrets.json` (mode 0600); client property files
for the admin user, usable by `seaway --command-config`, kcat's `-F` and librdkafka clients,
are written to `clients/`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from core.security.ca import CertificateAuthority

SECRETS_FILE = "secrets.json"
GATEWAY_USER = "seaway-gateway"
DR_TOPIC = "__seaway_dr"        # the DR controller's decision record (dr/), which gateways follow
PKI_DIR = "pki"
CLIENTS_DIR = "clients"
ACL_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# O=Seaway, CN=name (Kafka prints it CN=name,O=Seaway) -> name
MAPPING_RULES = "RULE:^CN=([^,]+),O=Seaway$/$1/,DEFAULT"


def node_principal(cluster: str) -> str:
    return f"User:node.{cluster}"


def node_identity_name(cluster: str, node_id: int) -> str:
    """The file name (in pki/, without suffix) of a node's certificate."""
    return f"{cluster}-node-{node_id}"


@dataclass(frozen=True)
class Identity:
    """A certificate's files, with its key and chain in one PEM file (ssl.keystore.type=PEM)."""
    keystore: Path
    cert: Path
    key: Path


class PlatformSecurity:
    """The CA, certificates and passwords of one platform's state directory; made on first
    use, kept after (a platform keeps its identities across restarts)."""

    def __init__(self, state_dir: Path, *, admin_user: str, mirror_user: str, mechanism: str,
                 gateway_user: str = GATEWAY_USER):
        self.state_dir = Path(state_dir)
        self.admin_user = admin_user
        self.mirror_user = mirror_user
        self.gateway_user = gateway_user
        self.mechanism = mechanism
        self.pki_dir = self.state_dir / PKI_DIR
        self._ca: CertificateAuthority | None = None
        self._passwords: dict[str, str] | None = None

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            with self._locked():
                self._ca = CertificateAuthority(self.pki_dir, name="Seaway platform CA")
        return self._ca

    @contextlib.contextmanager
    def _locked(self):
        """The platform's secrets are made by whichever process asks first, under this lock."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / (SECRETS_FILE + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    @property
    def ca_path(self) -> Path:
        return self.ca.cert_path

    def password(self, user: str) -> str:
        """The user's password, made the first time any process of the platform asks. Several
        processes plan the same layout (`regions up`, the supervisor, `regions status`), so
        the file is read and extended under a lock, never from a copy one of them kept."""
        if self._passwords is not None and user in self._passwords:
            return self._passwords[user]
        path = self.state_dir / SECRETS_FILE
        with self._locked():
            try:
                known = json.loads(path.read_text())
            except (OSError, ValueError):
                known = {}
            if user not in known:
                known[user] = secrets.token_urlsafe(18)
                _write_private(path.with_suffix(".tmp"), json.dumps(known, indent=2) + "\n")
                path.with_suffix(".tmp").replace(path)
        self._passwords = known
        return known[user]

    def identity(self, name: str, common_name: str, hosts: tuple[str, ...]) -> Identity:
        """The certificate `name` (issued now if the platform has none yet)."""
        cert, key = self.pki_dir / f"{name}.crt", self.pki_dir / f"{name}.key"
        keystore = self.pki_dir / f"{name}.pem"
        if not keystore.exists():
            ca = self.ca
            with self._locked():
                if not keystore.exists():
                    issued = ca.issue(name, common_name=common_name, hosts=hosts)
                    _write_private(keystore, issued.key.read_text() + issued.cert.read_text())
        return Identity(keystore, cert, key)

    def node_identity(self, cluster: str, node_id: int, host: str, also: tuple[str, ...] = ()) -> Identity:
        """The node's certificate; `also`: more names it answers to (a container's host name,
        the WAN proxy's)."""
        return self.identity(node_identity_name(cluster, node_id), f"node.{cluster}",
                             tuple(dict.fromkeys((host, *also, "localhost", "127.0.0.1"))))

    def gateway_identity(self, name: str, hosts: tuple[str, ...]) -> Identity:
        """The certificate of the gateway `name`'s listener, for the hosts its clients connect to."""
        return self.identity(name, name, tuple(dict.fromkeys((*hosts, "localhost", "127.0.0.1"))))

    @property
    def users(self) -> tuple[str, ...]:
        """The platform's own users: each has a SCRAM credential from a cluster's first start."""
        return (self.admin_user, self.mirror_user, self.gateway_user)

    def scram_arguments(self) -> list[str]:
        """`storage format` arguments that put the platform users' credentials in a new
        cluster's metadata log."""
        out = []
        for user in self.users:
            out += ["--add-scram", f"{self.mechanism}=[name={user},password={self.password(user)}]"]
        return out

    def client_properties(self, user: str) -> dict[str, str]:
        """Kafka client properties for `user` over SASL_SSL. ssl.ca.location is librdkafka's
        name (kcat -F, confluent-kafka); Seaway's CLI reads it too."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": self.mechanism, "sasl.username": user,
                "sasl.password": self.password(user), "ssl.ca.location": str(self.ca_path)}

    def client_properties_path(self, user: str) -> Path:
        return self.state_dir / CLIENTS_DIR / f"{user}.properties"

    def write_client_files(self) -> dict[str, Path]:
        """clients/<user>.properties for the platform's users; {user: path}."""
        out = {}
        for user in self.users:
            path = self.client_properties_path(user)
            props = self.client_properties(user)
            text = "".join(f"{k}={v}\n" for k, v in props.items())
            _write_private(path, f"# {user} on this platform's client listeners (written by `regions up`)\n" + text)
            out[user] = path
        return out

    def admin_certificate(self) -> Identity:
        """The admin user's client certificate, for the mTLS controller listeners."""
        return self.identity(f"{self.admin_user}-client", self.admin_user, ())

    def admin_security(self, *, controller: bool = False):
        """How the platform's own tools connect as the admin user: SCRAM over TLS to brokers,
        the admin certificate to controllers (core.client.security.ClientSecurity)."""
        from core.client.security import security_from_properties
        if controller:
            cert = self.admin_certificate()
            return security_from_properties({
                "security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_path)})
        return security_from_properties(self.client_properties(self.admin_user))

    def mirror_acls(self, cluster: str, links: list) -> list:
        """The ACLs the mirror user needs on `cluster` (see mirror_acls)."""
        return mirror_acls(self.mirror_user, cluster, links)

    def gateway_acls(self) -> list:
        """The ACLs the gateway user needs on each cluster of a DR pair (see gateway_acls)."""
        return gateway_acls(self.gateway_user)

    def node_properties(self, *, cluster: str, node_id: int, host: str, is_controller: bool) -> dict[str, str]:
        """What every node of a secured cluster gets, besides its listeners."""
        identity = self.node_identity(cluster, node_id, host)
        return secured_node_properties(keystore=str(identity.keystore), ca=str(self.ca_path), cluster=cluster,
                                       mechanism=self.mechanism, admin_user=self.admin_user,
                                       mtls_listeners=("internal", "controller") if is_controller else ("internal",))


def mirror_acls(mirror_user: str, cluster: str, links: list) -> list:
    """The ACLs `mirror_user` needs on `cluster`, for the mirror links (anything with source,
    target and policy) that read from it or write to it; core.client.acl_admin bindings.

    From a source it reads every topic and its configs, the groups' committed offsets
    (DESCRIBE on groups, and on the cluster to list them), and it keeps two topics of its
    own there: `heartbeats` and `mm2-offset-syncs.<target>.internal`. On a target it
    creates, writes, grows and configures the remote topics, which the default policy
    names `<source>.` (the identity policy keeps names, so there it is every topic),
    writes `<source>.checkpoints.internal` and `<source>.txn-decisions.internal`, and commits
    translated offsets into groups."""
    from core.client.acl_admin import AclBinding, AclOperation as Op, AclPermission, PatternType, ResourceType
    principal = f"User:{mirror_user}"
    out: list = []

    def grant(rtype, name, pattern, *ops):
        out.extend(AclBinding(rtype, name, pattern, principal, "*", op, AclPermission.ALLOW) for op in ops)

    T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
    LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
    for link in links:
        if link.source == cluster:
            grant(T, "*", LIT, Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
            grant(T, "heartbeats", LIT, Op.CREATE, Op.WRITE)
            grant(T, f"mm2-offset-syncs.{link.target}.internal", LIT, Op.CREATE, Op.WRITE, Op.READ)
            grant(G, "*", LIT, Op.DESCRIBE)
            grant(C, "kafka-cluster", LIT, Op.DESCRIBE)
        if link.target == cluster:
            remote = ("*", LIT) if link.policy == "identity" else (f"{link.source}.", PRE)
            grant(T, *remote, Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS,
                  Op.DESCRIBE_CONFIGS)
            grant(T, f"{link.source}.checkpoints.internal", LIT, Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE)
            # A DR link's record of the copied transactions it has whole (core/protocol/dr.py).
            grant(T, f"{link.source}.txn-decisions.internal", LIT, Op.CREATE, Op.WRITE, Op.READ, Op.DESCRIBE)
            grant(G, "*", LIT, Op.READ, Op.DESCRIBE)
            grant(C, "kafka-cluster", LIT, Op.DESCRIBE)
    return list(dict.fromkeys(out))

def gateway_acls(gateway_user: str) -> list:
    """What a gateway's own login needs on a cluster of its DR pair, and nothing more:
    ClusterAction on the cluster, to send the Envelopes that carry its clients' requests (each
    authorized as its client), and Read and Describe on the decision record it follows."""
    from core.client.acl_admin import AclBinding, AclOperation as Op, AclPermission, PatternType, ResourceType
    principal = f"User:{gateway_user}"
    return [AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, AclPermission.ALLOW)
            for rtype, name, op in ((ResourceType.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION),
                                    (ResourceType.TOPIC, DR_TOPIC, Op.READ),
                                    (ResourceType.TOPIC, DR_TOPIC, Op.DESCRIBE))]


def gateway_listener_properties(*, keystore: str, mechanism: str) -> dict[str, str]:
    """A secured platform's gateway listener (`seaway gateway --listener-config`): TLS with
    its own certificate, and the platform's SCRAM mechanism, relayed to the brokers."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore, "sasl.enabled.mechanisms": mechanism}


async def grant_until_created(name: str, bootstrap: str, bindings: list, client_security, *, log,
                             deadline: float | None = None) -> None:
    """Create `bindings` on the cluster `name`, asking again every second while it is still
    starting, until they are all in place (creating an ACL that exists changes nothing, so
    every start of a platform does it); TimeoutError once past `deadline` (monotonic)."""
    import time

    import anyio

    from core.client.acl_admin import AclAdmin
    from core.client.client import KafkaClient
    while True:
        try:
            async with KafkaClient(bootstrap, client_id="regions-acls", security=client_security) as client:
                errors = [e for e in await AclAdmin(client, timeout_ms=10_000).create_acls(bindings) if e]
            if not errors:
                log.info("ACLs in place on %s (%d)", name, len(bindings))
                return
            problem = errors[0]
        except Exception as exc:   # noqa: BLE001 — a cluster still starting; ask again
            problem = exc
        log.info("ACLs on %s not created yet: %s", name, problem)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"ACLs on {name} not created: {problem}")
        await anyio.sleep(1.0)


async def ensure_scram_user(name: str, bootstrap: str, user: str, password: str, mechanism: str, client_security,
                            *, log) -> None:
    """Give `user` its SCRAM credential on the cluster `name` if it has none for `mechanism`:
    a cluster formatted before the platform had that user (the gateway's, on a platform made
    by an older Seaway) gets it now. Asks again every second while the cluster is starting."""
    import anyio

    from core.client.client import KafkaClient
    from core.client.user_admin import ScramMechanism, ScramUpsertion, UserAdmin
    wanted = ScramMechanism.parse(mechanism)
    while True:
        try:
            async with KafkaClient(bootstrap, client_id="regions-users", security=client_security) as client:
                admin = UserAdmin(client, timeout_ms=10_000)
                known = (await admin.describe_user_scram_credentials([user])).get(user)
                if isinstance(known, list) and any(m == wanted for m, _ in known):
                    return
                error = (await admin.alter_user_scram_credentials([ScramUpsertion(user, wanted, password)]))[user]
            if error is None:
                log.info("SCRAM credential of %s created on %s", user, name)
                return
            problem: object = error
        except Exception as exc:   # noqa: BLE001 — a cluster still starting; ask again
            problem = exc
        log.info("SCRAM credential of %s on %s not created yet: %s", user, name, problem)
        await anyio.sleep(1.0)


def secured_node_properties(*, keystore: str, ca: str, cluster: str, mechanism: str, admin_user: str,
                            mtls_listeners: tuple[str, ...]) -> dict[str, str]:
    """A secured node's TLS, SASL and ACL settings (its listeners are the caller's): the node
    certificate, the platform CA, certificate subjects mapped to names, ACLs on with the
    cluster's nodes and the admin as super users, and client certificates required on the
    node-to-node listeners (lower-case listener names)."""
    props = {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
        "ssl.principal.mapping.rules": MAPPING_RULES,
        "sasl.enabled.mechanisms": mechanism,
        "authorizer.class.name": ACL_AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"{node_principal(cluster)};User:{admin_user}",
    }
    for listener in mtls_listeners:
        props[f"listener.name.{listener}.ssl.client.auth"] = "required"
    return props


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
