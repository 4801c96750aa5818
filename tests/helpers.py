"""Things several test modules share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODELS = Path(__file__).parent / "models"


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``precsearch ARGS`` in a fresh process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "precsearch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
