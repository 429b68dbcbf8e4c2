"""A secured compose platform's secrets (regions/compose_security.py), made as its pki service
makes them: every file where the compose file's properties look for it, a second run that
changes nothing, the host's copy of the admin's properties pointing at the host's CA, and bad
arguments as one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from core.client.properties import parse_properties
from core.node.bootstrap import read_add_scram_file
from mirror.link import LinkConfig
from regions import compose_security as secure
from tests.support.node import REPO

NODES = {("eu-west-1", 1): ("eu-west-1-1", "wan", "127.0.0.1"), ("us-east-1", 2): ("us-east-1-2", "wan", "127.0.0.1")}
GATEWAYS = {"gateway-eu-west-eu-west-1": ("gateway-eu-west-eu-west-1", "127.0.0.1")}


def make(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    volume, export = tmp_path / "volume", tmp_path / "export"
    export.mkdir(exist_ok=True)
    said = secure.make_secrets(volume, mechanism="SCRAM-SHA-256", admin_user="root-admin", mirror_user="copier",
                               nodes=NODES, export=export, export_ca="/home/me/seaway/compose/secrets/ca.crt",
                               gateways=GATEWAYS)
    return volume, export, said


def names_in(keystore: Path) -> tuple[x509.Certificate, set[str], set[str]]:
    """The certificate in a PEM keystore, and its DNS and IP names."""
    cert = x509.load_pem_x509_certificate(keystore.read_bytes().split(b"-----END PRIVATE KEY-----")[1])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (cert, set(names.get_values_for_type(x509.DNSName)),
            {str(ip) for ip in names.get_values_for_type(x509.IPAddress)})


def test_every_file_the_compose_file_names_is_made(tmp_path):
    volume, export, said = make(tmp_path)
    mount = str(volume)
    for (cluster, node_id), hosts in NODES.items():
        keystore = Path(secure.keystore_path(cluster, node_id, mount))
        assert oct(keystore.stat().st_mode & 0o777) == "0o600"
        cert, dns, ips = names_in(keystore)
        assert {hosts[0], "wan", "localhost"} <= dns and "127.0.0.1" in ips
        assert cert.subject.rfc4514_string().startswith(f"CN=node.{cluster}")
    # A gateway's listener certificate: its container's name, and 127.0.0.1 where it is published.
    for name, hosts in GATEWAYS.items():
        _, dns, ips = names_in(Path(secure.gateway_keystore_path(name, mount)))
        assert {name, "localhost"} <= dns and "127.0.0.1" in ips
    assert Path(secure.ca_path(mount)).exists()
    mirror = parse_properties(Path(secure.client_properties_path("copier", mount)).read_text())
    assert mirror["sasl.username"] == "copier" and mirror["ssl.ca.location"] == secure.ca_path(mount)
    gateway = parse_properties(Path(secure.client_properties_path("seaway-gateway", mount)).read_text())
    assert gateway["sasl.username"] == "seaway-gateway" and gateway["security.protocol"] == "SASL_SSL"
    # The specs each node's first start reads (`seaway node --add-scram-file`).
    records = read_add_scram_file(secure.scram_file_path(mount))
    assert sorted(r.name for r in records) == ["copier", "root-admin", "seaway-gateway"]
    assert {r.mechanism for r in records} == {1}
    # The host's copies: the admin's properties name the CA where the host sees it.
    admin = parse_properties((export / "root-admin.properties").read_text())
    assert admin["ssl.ca.location"] == "/home/me/seaway/compose/secrets/ca.crt"
    assert admin["sasl.password"] == json.loads((volume / "secrets.json").read_text())["root-admin"]
    assert oct((export / "root-admin.properties").stat().st_mode & 0o777) == "0o600"
    assert (export / "ca.crt").read_bytes() == Path(secure.ca_path(mount)).read_bytes()
    assert any("/home/me/seaway/compose/secrets/root-admin.properties" in line for line in said), said


def test_a_second_run_keeps_the_ca_and_the_passwords(tmp_path):
    volume, export, _ = make(tmp_path)
    before = {p: p.read_bytes() for p in volume.rglob("*") if p.is_file() and p.name != "scram.txt"}
    make(tmp_path)
    after = {p: p.read_bytes() for p in volume.rglob("*") if p.is_file() and p.name != "scram.txt"}
    assert after == before


def test_a_mirror_link_reads_its_login_from_a_properties_file(tmp_path):
    volume, _, _ = make(tmp_path)
    path = secure.client_properties_path("copier", str(volume))
    link = LinkConfig(source_alias="a", source_bootstrap="h:1", target_alias="b", target_bootstrap="h:2",
                      source_properties_file=path, target_properties_file=path,
                      target_properties={"sasl.username": "other"})
    assert link.source_properties["sasl.username"] == "copier"
    assert link.target_properties["sasl.username"] == "other"       # inline wins over the file
    assert link.security("source").sasl is not None


def test_a_missing_properties_file_is_one_line(tmp_path):
    config = tmp_path / "links.yaml"
    config.write_text("links:\n  - {source_alias: a, source_bootstrap: '127.0.0.1:1', target_alias: b, "
                      f"target_bootstrap: '127.0.0.1:2', source_properties_file: {tmp_path}/nope.properties}}\n")
    proc = subprocess.run([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"source_properties_file: cannot read {tmp_path}/nope.properties" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["pki", "--dir", "{d}", "--node", "eu-west-1=h"], "--node: 'eu-west-1=h' is not CLUSTER/ID=HOST[,HOST...]"),
    (["pki", "--dir", "{d}", "--node", "eu/x=h"], "--node: 'eu/x=h' is not CLUSTER/ID=HOST[,HOST...]"),
    (["pki", "--dir", "{d}", "--owner", "me"], "--owner: 'me' is not UID:GID"),
    (["pki", "--dir", "{d}", "--export", "{d}/none"], "--export: {d}/none is not a directory"),
    (["grant-mirror-acls", "--command-config", "{d}/none", "--cluster", "a=h:1"], "--command-config: cannot read {d}/none: No such file or directory"),
    (["grant-mirror-acls", "--command-config", "{d}/none", "--cluster", "a"], "--cluster: 'a' is not NAME=HOST:PORT[,HOST:PORT...]"),
    (["grant-mirror-acls", "--command-config", "{d}/none", "--link", "a,b,mirror"], "--link: 'a,b,mirror' is not SOURCE,TARGET[,default|identity]"),
    (["pki", "--dir", "{d}", "--gateway", "gw"], "--gateway: 'gw' is not NAME=HOST[,HOST...]"),
    (["grant-mirror-acls", "--command-config", "{d}/none", "--cluster", "a=h:1", "--gateway-cluster", "b"],
     "--gateway-cluster: 'b' is not a --cluster"),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
    args = [a.format(d=tmp_path) for a in args]
    proc = subprocess.run([sys.executable, "-m", "regions.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"regions {args[0]}: {message.format(d=tmp_path)}\n"
    assert not any(tmp_path.iterdir())        # refused before anything was made


def test_seaway_node_puts_the_file_credentials_in_a_new_metadata_log(tmp_path):
    """`seaway node --cluster-id --add-scram-file`: the specs go into the bootstrap file of a
    directory it formats; a bad line is one line naming the file and line, before anything."""
    specs = tmp_path / "scram.txt"
    specs.write_text("# users\nSCRAM-SHA-512=[name=alice,password=a-secret]\n\nSCRAM-SHA-256=[name=bob]\n")
    data = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "node", "--override", f"log.dirs={data}", "--override", "node.id=1",
                           "--cluster-id", "QDKHU8itVi22MRW8shkB6w", "--add-scram-file", str(specs)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"--add-scram-file: {specs}:4: name and password are both required" in proc.stderr
    assert not data.exists()
