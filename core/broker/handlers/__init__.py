"""Request handlers, one module per API, each opening with its versions and behaviour notes.

A handler is `async def handle(ctx, request) -> response | None`; None means "send nothing"
(acks=0 produce).
"""
from . import (alter_configs, api_versions, create_partitions, create_topics, delete_records,
               delete_topics, describe_cluster, describe_configs, fetch, init_producer_id, list_offsets, metadata,
               produce)

_MODULES = (produce, fetch, list_offsets, metadata, api_versions, create_topics, delete_topics,
            delete_records, describe_configs, alter_configs, create_partitions, describe_cluster,
            init_producer_id)

HANDLERS = {}
for _mod in _MODULES:
    for _key, _fn in _mod.HANDLES.items():
        HANDLERS[_key] = _fn
