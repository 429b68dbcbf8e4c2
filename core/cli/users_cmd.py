"""`seaway users`: SCRAM credentials, as `kafka-configs --entity-type users` manages them.

    seaway users add alice --mechanism SCRAM-SHA-256 --password-file alice.txt [--iterations 8192]
    seaway users list [alice ...]
    seaway users delete alice --mechanism SCRAM-SHA-256

The password is read from --password-file (its first line), or from --password (visible to
other users of the machine in the process list, like kafka-configs' --add-config), or from
standard input when neither is given. It is salted and hashed here; only SaltedPassword goes
to the cluster (AlterUserScramCredentials). `list` prints each user's mechanisms and
iteration counts, never a secret (DescribeUserScramCredentials).
"""
from __future__ import annotations

import sys
from pathlib import Path

from .common import CliError, UsageError, admin_command
from .output import add_bootstrap_flag, emit_json, table

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(sub) -> None:
    p = sub.add_parser("users", help="SCRAM users (add, list, delete)",
                       description="SCRAM credentials of SASL users (like kafka-configs --entity-type users).")
    add_bootstrap_flag(p)
    usub = p.add_subparsers(dest="action", metavar="ACTION")
    usub.required = True
    a = usub.add_parser("add", help="set a user's password for a SCRAM mechanism",
                        description="Create a SCRAM credential, or replace the one the user has for that mechanism.")
    a.add_argument("name")
    a.add_argument("--mechanism", default="SCRAM-SHA-256", type=str.upper, choices=MECHANISMS,
                   help="default SCRAM-SHA-256")
    a.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096-16384 (default 4096)")
    secret = a.add_mutually_exclusive_group()
    secret.add_argument("--password-file", metavar="FILE", help="read the password from the file's first line")
    secret.add_argument("--password", help="the password (visible in the process list; prefer --password-file)")
    admin_command(a, _add, _read_password)
    d = usub.add_parser("delete", help="delete a user's SCRAM credential")
    d.add_argument("name")
    d.add_argument("--mechanism", default="SCRAM-SHA-256", type=str.upper, choices=MECHANISMS,
                   help="default SCRAM-SHA-256")
    admin_command(d, _delete)
    ls = usub.add_parser("list", help="users and their SCRAM mechanisms")
    ls.add_argument("names", nargs="*", help="only these users")
    admin_command(ls, _list)


def _read_password(args) -> None:
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        try:
            lines = Path(args.password_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"--password-file {args.password_file}: {exc.strerror or exc}") from None
        password = lines[0] if lines else ""
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise UsageError("users add: the password is empty")
    if not args.name:
        raise UsageError("users add: the user name is empty")
    if not 4096 <= args.iterations <= 16384:
        raise UsageError(f"--iterations: {args.iterations} is outside 4096..16384")
    args.secret = password


async def _add(admin, args) -> int:
    from core.client.user_admin import ScramMechanism, ScramUpsertion
    mechanism = ScramMechanism.parse(args.mechanism)
    results = await admin.alter_user_scram_credentials(
        [ScramUpsertion(args.name, mechanism, args.secret, args.iterations)])
    _raise_for(results)
    print(f"Set the {args.mechanism} credential of user {args.name} ({args.iterations} iterations).")
    return 0


async def _delete(admin, args) -> int:
    from core.client.user_admin import ScramDeletion, ScramMechanism
    results = await admin.alter_user_scram_credentials([ScramDeletion(args.name, ScramMechanism.parse(args.mechanism))])
    _raise_for(results)
    print(f"Deleted the {args.mechanism} credential of user {args.name}.")
    return 0


def _raise_for(results) -> None:
    for user, error in results.items():
        if error is not None:
            raise CliError(f"user {user!r}: {error.message or error}")


async def _list(admin, args) -> int:
    found = await admin.describe_user_scram_credentials(args.names or None)
    rows, failed = [], False
    for user, info in sorted(found.items()):
        if isinstance(info, Exception):
            failed = True
            print(f"user {user!r}: {getattr(info, 'message', None) or info}", file=sys.stderr)
            continue
        for mechanism, iterations in info:
            rows.append({"user": user, "mechanism": mechanism.kafka_name, "iterations": iterations})
    if args.output == "json":
        emit_json(rows)
    else:
        table(["USER", "MECHANISM", "ITERATIONS"], [[r["user"], r["mechanism"], r["iterations"]] for r in rows])
    return 1 if failed else 0
