"""The one buffer type the codecs read: anything bytes-like whose items are ints."""
from __future__ import annotations

from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview
