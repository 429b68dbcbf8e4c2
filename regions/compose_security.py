"""A secured topology as containers: the certificates, passwords and ACLs that `regions up`
makes on the host, made instead by two one-shot services of the compose file.

Theory of operation
-------------------
Nothing secret is in the compose file, which is committed and the same on every machine. The
secrets are made on the first `up`, inside the platform, and kept on a volume (`pki`) that
every Seaway container mounts read-only at SECRETS_MOUNT:

    pki                 `regions pki`: the CA, a certificate per node (its container name, the
                        WAN's, localhost and 127.0.0.1) and per gateway (its container name,
                        localhost and 127.0.0.1, where it is published), the admin, mirror and
                        gateway users' passwords,
                        their client properties, and the SCRAM specs each node's first start
                        puts into its new metadata log (`seaway node --add-scram-file`). It
                        keeps whatever exists, so a second `up` changes nothing. It also copies
                        the CA and the admin's client properties to the host directory the file
                        names (`compose/secrets/` by default, or $SEAWAY_SECRETS_DIR), owned by
                        that directory's owner, so that clients on the host can log in.
    nodes               start once pki has finished; TLS and SCRAM as `regions up` sets them.
    mirror-acls         `regions grant-mirror-acls`: once the nodes have started, the admin
                        user grants the mirror user the ACLs its links need
                        (security.mirror_acls), and the gateway user its own on the DR
                        pairs' clusters (security.gateway_acls), asking again until the
                        clusters take them.
    mirror-*, gateway-* start once mirror-acls has finished; log in as the mirror user, the
                        gateway user (which relays its clients' own logins).

Every Seaway container runs as the image's user (uid 10001), so the volume's files are that
user's; the pki service alone runs as root, to write them and to hand the host's copies to
their owner.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from collections import namedtuple
from pathlib import Path

import anyio

from .security import (GATEWAY_USER, PlatformSecurity, ensure_scram_user, gateway_acls, grant_until_created,
                       mirror_acls, node_identity_name)

SECRETS_MOUNT = "/etc/seaway/secure"
EXPORT_MOUNT = "/export"
SCRAM_FILE = "scram.txt"
IMAGE_USER = (10001, 10001)          # compose/Dockerfile's `seaway`

Link = namedtuple("Link", "source target policy")
log = logging.getLogger("regions.compose_security")


def ca_path(mount: str = SECRETS_MOUNT) -> str:
    return f"{mount}/pki/ca.crt"


def keystore_path(cluster: str, node_id: int, mount: str = SECRETS_MOUNT) -> str:
    return f"{mount}/pki/{node_identity_name(cluster, node_id)}.pem"


def gateway_keystore_path(name: str, mount: str = SECRETS_MOUNT) -> str:
    return f"{mount}/pki/{name}.pem"


def client_properties_path(user: str, mount: str = SECRETS_MOUNT) -> str:
    return f"{mount}/clients/{user}.properties"


def scram_file_path(mount: str = SECRETS_MOUNT) -> str:
    return f"{mount}/{SCRAM_FILE}"


def make_secrets(directory: Path, *, mechanism: str, admin_user: str, mirror_user: str,
                 nodes: dict[tuple[str, int], tuple[str, ...]], export: Path | None = None,
                 export_ca: str | None = None, owner: tuple[int, int] | None = None,
                 gateways: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """What the pki service does (module docstring); `nodes`: (cluster, id) -> the host names
    its certificate names; `gateways`: name -> the same. Returns what to tell the operator,
    one line each."""
    security = PlatformSecurity(directory, admin_user=admin_user, mirror_user=mirror_user, mechanism=mechanism,
                                gateway_user=GATEWAY_USER)
    for (cluster, node_id), hosts in nodes.items():
        security.node_identity(cluster, node_id, hosts[0], also=hosts[1:])
    for name, hosts in (gateways or {}).items():
        security.gateway_identity(name, hosts)
    security.write_client_files()
    specs = security.scram_arguments()[1::2]
    _write(directory / SCRAM_FILE, "# SCRAM credentials for a new cluster's metadata log (regions pki)\n"
           + "".join(f"{spec}\n" for spec in specs), 0o600)
    said = [f"pki: CA {security.ca_path}, {len(nodes)} node certificates, {len(gateways or {})} gateway "
            f"certificates, users {admin_user}, {mirror_user} and {GATEWAY_USER}"]
    if owner is not None:
        _chown_tree(directory, owner)
    if export is not None:
        ca = export / "ca.crt"
        shutil.copyfile(security.ca_path, ca)
        os.chmod(ca, 0o644)
        props = dict(security.client_properties(admin_user), **{"ssl.ca.location": export_ca or str(ca)})
        admin = export / f"{admin_user}.properties"
        _write(admin, f"# {admin_user} on this platform's client listeners, from the host (written by "
               f"`regions pki`)\n" + "".join(f"{k}={v}\n" for k, v in props.items()), 0o600)
        host_owner = export.stat()
        for path in (ca, admin):
            os.chown(path, host_owner.st_uid, host_owner.st_gid)
        shown = Path(export_ca).parent if export_ca else export
        said.append(f"pki: for clients on the host: {shown / admin.name} "
                    f"(kcat -F {shown / admin.name} -b BOOTSTRAP -L)")
    return said


async def grant_mirror_acls(*, mirror_user: str, clusters: dict[str, str], links: list[Link], client_security,
                            timeout: float, gateway_user: str | None = None,
                            gateway_clusters: tuple[str, ...] = (), gateway_login: dict[str, str] | None = None
                            ) -> int:
    """What the mirror-acls service does: every ACL the links need, on every cluster they
    touch, and the gateway user's on `gateway_clusters`, where it also gets its SCRAM
    credential if the cluster has none (`gateway_login`: its client properties; a volume made
    before the platform had gateways); the number of ACLs granted. TimeoutError names the
    cluster that never took them."""
    deadline = time.monotonic() + timeout
    granted = 0
    for name, bootstrap in clusters.items():
        wanted = mirror_acls(mirror_user, name, links)
        if gateway_user is not None and name in gateway_clusters:
            wanted += gateway_acls(gateway_user)
        if wanted:
            await grant_until_created(name, bootstrap, wanted, client_security, log=log, deadline=deadline)
            granted += len(wanted)
        if gateway_user is not None and gateway_login and name in gateway_clusters:
            with anyio.fail_after(max(deadline - time.monotonic(), 1.0)):
                await ensure_scram_user(name, bootstrap, gateway_user, gateway_login["sasl.password"],
                                        gateway_login["sasl.mechanism"], client_security, log=log)
    return granted


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _chown_tree(root: Path, owner: tuple[int, int]) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, *owner, follow_symlinks=False)


def parse_node(text: str) -> tuple[tuple[str, int], tuple[str, ...]]:
    """`CLUSTER/ID=HOST[,HOST...]`; ValueError naming the flag."""
    key, sep, hosts = text.partition("=")
    cluster, slash, node_id = key.partition("/")
    if not sep or not slash or not cluster or not node_id.isdigit() or not hosts.strip(","):
        raise ValueError(f"--node: {text!r} is not CLUSTER/ID=HOST[,HOST...]")
    return (cluster, int(node_id)), tuple(h for h in hosts.split(",") if h)


def parse_gateway(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=HOST[,HOST...]`; ValueError naming the flag."""
    name, sep, hosts = text.partition("=")
    if not sep or not name or not hosts.strip(","):
        raise ValueError(f"--gateway: {text!r} is not NAME=HOST[,HOST...]")
    return name, tuple(h for h in hosts.split(",") if h)


def parse_link(text: str) -> Link:
    """`SOURCE,TARGET[,POLICY]`; ValueError naming the flag."""
    parts = text.split(",")
    if len(parts) not in (2, 3) or not all(parts) or (len(parts) == 3 and parts[2] not in ("default", "identity")):
        raise ValueError(f"--link: {text!r} is not SOURCE,TARGET[,default|identity]")
    return Link(parts[0], parts[1], parts[2] if len(parts) == 3 else "default")


def parse_cluster(text: str) -> tuple[str, str]:
    name, sep, bootstrap = text.partition("=")
    if not sep or not name or not bootstrap:
        raise ValueError(f"--cluster: {text!r} is not NAME=HOST:PORT[,HOST:PORT...]")
    return name, bootstrap
