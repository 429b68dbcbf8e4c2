"""Which cluster a `seaway` command talks to (core/cli/common.py resolve_cluster, reading
core/platform_file.py): --bootstrap-server, --cluster NAME of the running platform,
$SEAWAY_BOOTSTRAP, the platform's only cluster, or 127.0.0.1:9092 when none runs. Every
mistake is one line, exit 2, before anything connects."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.cli.common import resolve_cluster
from core.cli.main import build_parser, main
from core.platform_file import running_platform

EU = "127.0.0.1:19092,127.0.0.1:19192"
US = "127.0.0.1:29092"


def write_platform(state_dir, clusters: dict[str, str], *, pid: int | None = None, secured: bool = False):
    state_dir.mkdir(parents=True, exist_ok=True)
    data = {"name": "seaway", "supervisor_pid": pid or os.getpid(),
            "clusters": {name: {"region": name.rsplit("-", 1)[0], "bootstrap": b} for name, b in clusters.items()},
            "security": ({"admin_user": "admin", "client_properties": {"admin": str(state_dir / "admin.properties")}}
                         if secured else None)}
    (state_dir / "platform.json").write_text(json.dumps(data))


def resolved(argv: list[str]):
    args = build_parser().parse_args(argv)
    resolve_cluster(args)
    return args.bootstrap_server, args.command_config


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.delenv("SEAWAY_BOOTSTRAP", raising=False)
    monkeypatch.setenv("SEAWAY_STATE_DIR", str(tmp_path / "platform"))
    return tmp_path / "platform"


@pytest.mark.parametrize("platform, env, argv, expected", [
    # no platform running
    (None, None, ["topics", "list"], ("127.0.0.1:9092", None)),
    (None, "10.0.0.1:9092", ["topics", "list"], ("10.0.0.1:9092", None)),
    (None, None, ["topics", "list", "-b", "h:1"], ("h:1", None)),
    (None, None, ["topics", "-b", "h:1", "list"], ("h:1", None)),        # on the group, before the action
    # a platform of one cluster: it, unless told otherwise
    ({"eu-west-1": EU}, None, ["topics", "list"], (EU, None)),
    ({"eu-west-1": EU}, "10.0.0.1:9092", ["topics", "list"], ("10.0.0.1:9092", None)),
    ({"eu-west-1": EU}, None, ["topics", "list", "-b", "h:1"], ("h:1", None)),
    # two clusters: named on the action, the group or before the command
    ({"eu-west-1": EU, "us-east-1": US}, None, ["topics", "list", "--cluster", "us-east-1"], (US, None)),
    ({"eu-west-1": EU, "us-east-1": US}, None, ["topics", "--cluster", "us-east-1", "list"], (US, None)),
    ({"eu-west-1": EU, "us-east-1": US}, None, ["--cluster", "us-east-1", "groups", "list"], (US, None)),
    ({"eu-west-1": EU, "us-east-1": US}, "10.0.0.1:9092", ["topics", "list", "--cluster", "eu-west-1"], (EU, None)),
    # acls keeps kafka-acls' --cluster (the resource); the cluster is named before the command
    ({"eu-west-1": EU, "us-east-1": US}, None, ["--cluster", "eu-west-1", "acls", "list", "--cluster"], (EU, None)),
    # quorum describe, with none of its -b/-C
    ({"eu-west-1": EU, "us-east-1": US}, None, ["quorum", "describe", "--cluster", "us-east-1"], (US, None)),
])
def test_which_cluster_a_command_talks_to(state, monkeypatch, platform, env, argv, expected):
    if platform:
        write_platform(state, platform)
    if env:
        monkeypatch.setenv("SEAWAY_BOOTSTRAP", env)
    assert resolved(argv) == expected


def test_a_secured_platform_lends_its_admin_properties_unless_others_are_given(state):
    write_platform(state, {"eu-west-1": EU, "us-east-1": US}, secured=True)
    assert resolved(["topics", "list", "--cluster", "eu-west-1"]) == (EU, str(state / "admin.properties"))
    assert resolved(["topics", "list", "--cluster", "eu-west-1", "--command-config", "mine.properties"]) == (
        EU, "mine.properties")
    assert resolved(["topics", "list", "-b", "h:1"]) == ("h:1", None)   # not the platform's cluster


@pytest.mark.parametrize("platform, argv, message", [
    ({"eu-west-1": EU, "us-east-1": US}, ["topics", "list"],
     f"platform 'seaway' runs 2 clusters: name one with --cluster NAME (or give --bootstrap-server): "
     f"eu-west-1 ({EU}), us-east-1 ({US})"),
    ({"eu-west-1": EU, "us-east-1": US}, ["topics", "list", "--cluster", "ap-south-1"],
     f"--cluster ap-south-1: platform 'seaway' has no such cluster; its clusters: eu-west-1 ({EU}), us-east-1 ({US})"),
    (None, ["topics", "list", "--cluster", "eu-west-1"], "--cluster eu-west-1: no platform is running in {state}"),
    ({"eu-west-1": EU}, ["topics", "list", "--cluster", "eu-west-1", "-b", "h:1"],
     "--bootstrap-server and --cluster name the cluster twice: give one"),
])
def test_a_cluster_that_cannot_be_told_is_one_line_exit_2_before_connecting(state, capsys, platform, argv, message):
    if platform:
        write_platform(state, platform)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("seaway: error: " + message.format(state=state)), err


def test_a_platform_file_left_by_a_dead_supervisor_is_no_platform(state):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_platform(state, {"eu-west-1": EU, "us-east-1": US}, pid=dead.pid)
    assert running_platform() is None
    assert resolved(["topics", "list"]) == ("127.0.0.1:9092", None)


@pytest.mark.parametrize("text", ["", "{", '{"supervisor_pid": "x"}', '{"clusters": {}}', "[]"])
def test_a_malformed_platform_file_is_no_platform(state, text):
    state.mkdir(parents=True)
    (state / "platform.json").write_text(text)
    assert running_platform() is None


def test_the_state_dir_flag_beats_the_environment(state, tmp_path):
    other = tmp_path / "other"
    write_platform(other, {"solo-1": US})
    assert resolved(["--state-dir", str(other), "topics", "list"]) == (US, None)


def test_nothing_running_and_nothing_at_the_default_says_both(state, capsys, monkeypatch):
    """The fallback is a guess: when nothing answers there the line says what was tried."""
    import socket

    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr("core.cli.common.DEFAULT_BOOTSTRAP", closed)
    assert main(["topics", "list", "--timeout", "3"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"cannot connect to {closed}" in err or f"no answer from {closed} within 3s" in err
    assert err.rstrip().endswith(f"(nothing was named, no platform runs in {state}, so {closed} was tried: "
                                 f"give --bootstrap-server HOST:PORT or --cluster NAME)")
