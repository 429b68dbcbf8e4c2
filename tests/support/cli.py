"""`seaway` as a user types it: the CLI in a subprocess, its output as text."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tests.support.node import REPO

# No platform and no $SEAWAY_BOOTSTRAP unless a test says so: a platform running in the
# developer's ~/.seaway/platform must not decide which cluster a test's commands reach.
NO_PLATFORM = tempfile.mkdtemp(prefix="seaway-no-platform-")


def isolated_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SEAWAY_BOOTSTRAP"}
    env["SEAWAY_STATE_DIR"] = NO_PLATFORM
    env.update(overrides)
    return env


def seaway(*args, check=True, timeout=60, env: dict[str, str] | None = None):
    proc = subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env if env is not None else isolated_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"seaway {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc
