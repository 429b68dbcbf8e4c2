"""The classic consumer-group coordinator: a pure state machine (DESIGN.md principle 3).

    coord = Coordinator(GroupConfig(...), seed=0)
    actions = coord.handle(JoinGroup(...))   # or SyncGroup, Heartbeat, LeaveGroup, ...
    actions = coord.tick(now_ms)             # fire due timers

Driver contract: execute the actions of one call in order; a PersistGroup must be durable
before any later Respond of the same batch is sent; keep one wake-up per timer key
(ScheduleTimer replaces, CancelTimer removes) and call `tick(now)` when the earliest is due,
including right away when a ScheduleTimer is already due (at_ms <= now).
`load_group`/`unload_group` follow __consumer_offsets partition leadership.
The asyncio driver, wire codecs and __consumer_offsets storage live elsewhere.
"""
from . import events as _events
from .coordinator import Coordinator, GroupConfig
from .events import *  # noqa: F401,F403
from .state import Group, GroupState, IllegalStateTransition, Member

__all__ = ["Coordinator", "GroupConfig", "Group", "GroupState", "IllegalStateTransition",
           "Member"] + [n for n in vars(_events) if n[:1].isupper() and not n.startswith("_")
                        and n not in ("ErrorCode", "Hashable", "Optional", "Union")]
