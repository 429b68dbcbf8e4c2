"""Request handlers, one module per API, each opening with its versions and behaviour notes.

A handler is `async def handle(ctx, request) -> response | None`; None means "send nothing"
(acks=0 produce). Each module lists what it handles in `HANDLES` ({ApiKey: handler}); two
modules claiming one API key is a bug that fails at import (as franz-go's kfake does), never a
silent override by whichever module comes last.
"""
from core.protocol.api_keys import ApiKey

from . import (add_offsets_to_txn, add_partitions_to_txn, end_txn, txn_offset_commit, write_txn_markers)
from . import (describe_log_dirs, describe_producers, describe_transactions, list_transactions)
from . import (api_versions, delete_groups, delete_records, describe_acls, describe_cluster, describe_configs,
               describe_user_scram_credentials,
               describe_groups, describe_quorum, envelope, fetch, find_coordinator, forwarded, heartbeat,
               init_producer_id, join_group, leave_group, list_groups, list_offsets, metadata,
               offset_commit, offset_delete, offset_fetch, offset_for_leader_epoch, produce, sasl, sync_group)

_MODULES = (forwarded, produce, fetch, list_offsets, metadata, api_versions, delete_records,
            describe_configs, describe_cluster, describe_quorum, init_producer_id, find_coordinator,
            join_group, sync_group, heartbeat, leave_group, describe_groups, list_groups, delete_groups,
            offset_commit, offset_fetch, offset_delete, offset_for_leader_epoch, sasl,
            describe_user_scram_credentials, describe_acls, envelope,
            add_partitions_to_txn, add_offsets_to_txn, end_txn, write_txn_markers, txn_offset_commit,
            describe_producers, describe_transactions, list_transactions, describe_log_dirs)


class DuplicateHandlerError(RuntimeError):
    """Two handler modules claim one API key."""


def collect_handles(modules) -> dict:
    """API key -> handler, from each module's HANDLES, in module order; raises
    DuplicateHandlerError naming both modules when a key is claimed twice."""
    table: dict = {}
    owner: dict = {}
    for mod in modules:
        for key, fn in mod.HANDLES.items():
            if key in owner:
                try:
                    name = ApiKey(key).name
                except ValueError:
                    name = "unknown API"
                raise DuplicateHandlerError(f"API key {int(key)} ({name}) has two handlers: "
                                            f"{owner[key].__name__} and {mod.__name__}")
            owner[key] = mod
            table[key] = fn
    return table


HANDLERS = collect_handles(_MODULES)
