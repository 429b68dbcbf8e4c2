"""Request handler tables: one handler per API key, and keys named by the ApiKey enum."""
from __future__ import annotations

import importlib
import sys
import types

import pytest

import core.broker
from core.broker import handlers
from core.protocol.api_keys import ApiKey


def _module(name: str, handles: dict) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.HANDLES = handles
    return mod


async def _handle(ctx, request):
    return None


def test_a_second_handler_for_one_key_raises_naming_both_modules():
    first = _module("pkg.create_topics", {ApiKey.CREATE_TOPICS: _handle})
    second = _module("pkg.other", {ApiKey.DELETE_TOPICS: _handle, 19: _handle})
    with pytest.raises(handlers.DuplicateHandlerError) as info:
        handlers.collect_handles([first, second])
    assert str(info.value) == ("API key 19 (CREATE_TOPICS) has two handlers: "
                               "pkg.create_topics and pkg.other")


def test_distinct_keys_keep_module_order():
    a = _module("a", {ApiKey.FETCH: _handle})
    b = _module("b", {ApiKey.PRODUCE: _handle, 999: _handle})
    assert list(handlers.collect_handles([a, b])) == [ApiKey.FETCH, ApiKey.PRODUCE, 999]


def test_a_duplicate_fails_the_import_of_the_handler_table(monkeypatch):
    """Re-run core/broker/handlers/__init__.py with one module claiming Produce as well."""
    name = "core.broker.handlers"
    rogue = _module(f"{name}.heartbeat", {ApiKey.HEARTBEAT: _handle, ApiKey.PRODUCE: _handle})
    monkeypatch.setitem(sys.modules, f"{name}.heartbeat", rogue)
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(core.broker, "handlers", handlers)  # restored whatever the import does
    with pytest.raises(RuntimeError) as info:  # the re-run module's own DuplicateHandlerError
        importlib.import_module(name)
    assert type(info.value).__name__ == "DuplicateHandlerError"
    assert str(info.value) == ("API key 0 (PRODUCE) has two handlers: core.broker.handlers.produce "
                               "and core.broker.handlers.heartbeat")
    assert sys.modules.get(name) is None  # the failed import left no half-built table behind


def test_every_handler_key_is_an_api_key_member():
    assert set(handlers.HANDLERS) == set(handlers.collect_handles(handlers._MODULES))
    assert all(type(k) is ApiKey for k in handlers.HANDLERS)


def test_controller_table_sources_do_not_overlap():
    """CONTROLLER_HANDLERS (core/node/controller_apis.py) is filled from three sources; a key
    in two of them would be silently overridden, so they must stay disjoint."""
    from core.node import controller_apis
    from core.controller.controller import HANDLED_APIS

    own = {ApiKey.API_VERSIONS, ApiKey.DESCRIBE_CLUSTER, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    raft = set(controller_apis._REQUEST_OF)
    assert not (own & HANDLED_APIS) and not (own & raft) and not (HANDLED_APIS & raft)
    assert set(controller_apis.CONTROLLER_HANDLERS) == own | HANDLED_APIS | raft
    assert all(type(k) is ApiKey for k in controller_apis.CONTROLLER_HANDLERS)
