"""The platform supervisor's control socket, from either end: one JSON object per line each
way over `<state dir>/control.sock` (regions/supervisor.py lists the commands).

Its own small module so that a program which only asks the supervisor something (`regions
stop`, a full `dr drill`) imports nothing of what the supervisor runs.
"""
from __future__ import annotations

import json
from pathlib import Path

import anyio

CONTROL_SOCKET = "control.sock"
MAX_COMMAND_BYTES = 64 * 1024


async def receive_line(stream) -> str:
    buf = b""
    while b"\n" not in buf:
        chunk = await stream.receive(4096)
        buf += chunk
        if len(buf) > MAX_COMMAND_BYTES:
            raise ValueError(f"longer than {MAX_COMMAND_BYTES} bytes")
    return buf.split(b"\n", 1)[0].decode()


async def send_command(state_dir: Path, request: dict, timeout: float = 60.0) -> dict | None:
    """The supervisor's answer, or None if no supervisor listens in `state_dir`."""
    path = Path(state_dir) / CONTROL_SOCKET
    if not path.exists():
        return None
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_unix(path)
            async with stream:
                await stream.send(json.dumps(request).encode() + b"\n")
                return json.loads(await receive_line(stream))
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        return None
