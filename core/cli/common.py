"""What the `seaway` subcommands share: the errors main() turns into one line, the helper that
runs an admin command against the cluster, and reading a JSON file named on the command line.

Command modules import from here (and from output.py), never from each other or from main.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import anyio

from .output import add_bootstrap_flag, add_output_flag


class CliError(Exception):
    """An error worth one line on stderr and exit status 1."""


class UsageError(CliError):
    """A mistake in the command line or in a file it names: one line, exit status 2."""


def admin_command(parser, func, prepare=None, *, cluster_flag: bool = True) -> None:
    """Give an action the flags every admin command has (--bootstrap-server, --cluster,
    --output, --timeout) and run it as `await func(admin, args)` through with_admin.
    `prepare(args)`, if given, runs first: bad flags and files fail before anything connects."""
    add_bootstrap_flag(parser, leaf=True, cluster_flag=cluster_flag)
    add_output_flag(parser)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the cluster (default: 30)")

    def run(args):
        if prepare is not None:
            prepare(args)
        return anyio.run(with_admin, func, args)
    parser.set_defaults(func=run)


async def with_admin(func, args) -> int:
    """`await func(admin, args)` with an Admin on a client of args.bootstrap_server, closed
    afterwards; a cluster that does not answer within args.timeout is a CliError."""
    from core.client import Admin, KafkaClient   # not at module level: `seaway --help` stays fast

    timeout_ms = int(args.timeout * 1000)
    client = KafkaClient(args.bootstrap_server, client_id="seaway-cli", default_api_timeout_ms=timeout_ms,
                         request_timeout_ms=min(timeout_ms, 30_000), allow_auto_create_topics=False,
                         security=command_config_security(getattr(args, "command_config", None)))
    from core.protocol.errors import ErrorCode, KafkaError
    hint = guess_hint(args)
    try:
        with anyio.fail_after(args.timeout + 5):
            async with client:     # closes its connections even when the time is up
                return await func(Admin(client, timeout_ms=timeout_ms), args) or 0
    except TimeoutError:
        last = f" (the last attempt: {client.last_metadata_error})" if client.last_metadata_error else ""
        raise CliError(f"no answer from {args.bootstrap_server} within {args.timeout:g}s{last}{hint}") from None
    except KafkaError as exc:
        if hint and exc.code == ErrorCode.NETWORK_EXCEPTION:
            raise CliError(f"{exc}{hint}") from None
        raise


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def resolve_cluster(args) -> None:
    """Settle args.bootstrap_server (and args.command_config) from what was given, in order:
    --bootstrap-server; --cluster NAME, a cluster of the running platform; $SEAWAY_BOOTSTRAP;
    the running platform's only cluster; 127.0.0.1:9092 when no platform runs. A platform of
    several clusters with none named is a UsageError that lists them: guessing one could
    change the wrong cluster."""
    import os

    from core.platform_file import running_platform

    bootstrap = getattr(args, "bootstrap_server", None)
    name = getattr(args, "platform_cluster", None)
    if getattr(args, "command_config", None) is None:
        args.command_config = None
    if bootstrap and name:
        raise UsageError("--bootstrap-server and --cluster name the cluster twice: give one")
    if bootstrap:
        return
    state_dir = Path(args.state_dir) if getattr(args, "state_dir", None) else None
    if name:
        platform = running_platform(state_dir)
        if platform is None:
            raise UsageError(f"--cluster {name}: no platform is running in {_where(state_dir)} "
                             f"(start one with `regions up`, or give --state-dir)")
        cluster = platform.clusters.get(name)
        if cluster is None:
            raise UsageError(f"--cluster {name}: platform {platform.name!r} has no such cluster; "
                             f"its clusters: {platform.listing()}")
        _use(args, cluster)
        return
    if os.environ.get("SEAWAY_BOOTSTRAP"):
        args.bootstrap_server = os.environ["SEAWAY_BOOTSTRAP"]
        return
    platform = running_platform(state_dir)
    if platform is None or not platform.clusters:
        args.bootstrap_server = DEFAULT_BOOTSTRAP
        args.guessed_from = _where(state_dir)     # with_admin says so if nothing answers there
    elif len(platform.clusters) == 1:
        _use(args, next(iter(platform.clusters.values())))
    else:
        raise UsageError(f"platform {platform.name!r} runs {len(platform.clusters)} clusters: name one with "
                         f"--cluster NAME (or give --bootstrap-server): {platform.listing()}")


def guess_hint(args) -> str:
    """What to add to a connection error when the address was resolve_cluster's last guess."""
    guessed = getattr(args, "guessed_from", None)
    if not guessed:
        return ""
    return (f" (nothing was named, no platform runs in {guessed}, so {args.bootstrap_server} was tried: "
            f"give --bootstrap-server HOST:PORT or --cluster NAME)")


def _use(args, cluster) -> None:
    args.bootstrap_server = cluster.bootstrap
    if args.command_config is None:
        args.command_config = cluster.client_properties


def _where(state_dir: Path | None) -> str:
    from core.platform_file import default_state_dir
    return str(state_dir or default_state_dir())


def command_config_security(path: str | None):
    """The TLS and SASL a --command-config file asks for (plaintext without one); a
    UsageError that names the file and the key when it cannot be read or cannot work."""
    from core.client.security import PLAINTEXT, SaslSettingsError, TlsError, security_from_properties
    if path is None:
        return PLAINTEXT
    from core.config import load_properties
    from core.config.defs import ConfigError
    try:
        return security_from_properties(load_properties(path), where=f"{path}: ")
    except (ConfigError, TlsError, SaslSettingsError) as exc:
        raise UsageError(f"--command-config {exc}") from None


def read_json_file(path: str, flag: str):
    """The JSON document in `path`; a UsageError naming the flag if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
