"""Request handlers, one module per API, each opening with its versions and behaviour notes.

A handler is `async def handle(ctx, request) -> response | None`; None means "send nothing"
(acks=0 produce).
"""
from . import (api_versions, delete_groups, delete_records, describe_cluster, describe_configs,
               describe_groups, describe_quorum, fetch, find_coordinator, forwarded, heartbeat,
               init_producer_id, join_group, leave_group, list_groups, list_offsets, metadata,
               offset_commit, offset_delete, offset_fetch, offset_for_leader_epoch, produce, sync_group)

_MODULES = (forwarded, produce, fetch, list_offsets, metadata, api_versions, delete_records,
            describe_configs, describe_cluster, describe_quorum, init_producer_id, find_coordinator,
            join_group, sync_group, heartbeat, leave_group, describe_groups, list_groups, delete_groups,
            offset_commit, offset_fetch, offset_delete, offset_for_leader_epoch)

HANDLERS = {}
for _mod in _MODULES:
    HANDLERS.update(_mod.HANDLES)
