"""`seaway` as a user types it: the CLI in a subprocess, its output as text."""
from __future__ import annotations

import subprocess
import sys

from tests.support.node import REPO


def seaway(*args, check=True, timeout=60):
    proc = subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"seaway {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc
