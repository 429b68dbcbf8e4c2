"""`seaway storage`: Kafka's kafka-storage tool. `format` gives a node's directories their
cluster id before the first start, so that every node of a cluster agrees on it (a single node
started without it formats itself with a new id); `random-uuid` makes an id; `info` shows what
a node's directories hold."""
from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("storage", help="format and inspect a node's storage",
                       description="Format and inspect a node's log directories (like kafka-storage).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    a = actions.add_parser("random-uuid", help="print a new cluster id")
    a.set_defaults(func=random_uuid)

    f = actions.add_parser("format", help="write meta.properties with the cluster id into every log dir")
    f.add_argument("--config", "-c", metavar="FILE", required=True, help="the node's properties file")
    f.add_argument("--cluster-id", "-t", required=True, help="the cluster id, from `seaway storage random-uuid`")
    f.add_argument("--ignore-formatted", "-g", action="store_true",
                   help="skip directories already formatted for this cluster instead of failing")
    f.add_argument("--add-scram", "-S", metavar="SPEC", action="append", default=[],
                   help="a SCRAM credential for the new cluster's metadata, as kafka-storage takes it: "
                        "'SCRAM-SHA-256=[name=alice,password=alice-secret]' (iterations= optional; repeatable)")
    f.add_argument("--add-scram-file", metavar="FILE", action="append", default=[],
                   help="--add-scram specs, one per line (keeps passwords off the command line)")
    f.set_defaults(func=format_dirs)

    i = actions.add_parser("info", help="show the cluster and node id of each log dir")
    i.add_argument("--config", "-c", metavar="FILE", required=True, help="the node's properties file")
    i.set_defaults(func=info)


def _config(path: str):
    from core.config import BrokerConfig, load_properties
    return BrokerConfig(load_properties(path), warn_unknown=False)


def random_uuid(args) -> int:
    from core.node.storage import new_cluster_id
    print(new_cluster_id())
    return 0


def format_dirs(args) -> int:
    from core.node.bootstrap import parse_add_scram, read_add_scram_file, write_bootstrap
    from core.node.storage import format_storage
    config = _config(args.config)
    # Bad specs fail before anything is written.
    scram = [parse_add_scram(spec) for spec in args.add_scram]
    scram += [record for path in args.add_scram_file for record in read_add_scram_file(path)]
    for directory, what in format_storage([Path(d) for d in config.log_dirs], config.node_id,
                                          args.cluster_id, ignore_formatted=args.ignore_formatted):
        print(f"{what}: {directory} (cluster {args.cluster_id}, node {config.node_id})")
    if scram:
        path = write_bootstrap(Path(config.metadata_log_dir), scram)
        users = ", ".join(sorted({record.name for record in scram}))
        print(f"wrote {len(scram)} SCRAM credentials ({users}) to {path}: the controller adds them "
              f"to a new metadata log")
    return 0


def info(args) -> int:
    from core.node.storage import read_meta
    config = _config(args.config)
    missing = 0
    for d in config.log_dirs:
        meta = read_meta(Path(d))
        if meta is None:
            print(f"{d}: not formatted")
            missing += 1
        else:
            print(f"{d}: cluster {meta.get('cluster.id')}, node {meta.get('node.id')}, "
                  f"meta.properties version {meta.get('version')}")
    return 1 if missing else 0
