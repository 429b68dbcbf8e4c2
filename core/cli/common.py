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


def admin_command(parser, func, prepare=None) -> None:
    """Give an action the flags every admin command has (--bootstrap-server, --output,
    --timeout) and run it as `await func(admin, args)` through with_admin. `prepare(args)`,
    if given, runs first: bad flags and files fail before anything connects."""
    add_bootstrap_flag(parser, leaf=True)
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
    try:
        with anyio.fail_after(args.timeout + 5):
            async with client:     # closes its connections even when the time is up
                return await func(Admin(client, timeout_ms=timeout_ms), args) or 0
    except TimeoutError:
        raise CliError(f"no answer from {args.bootstrap_server} within {args.timeout:g}s") from None


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
