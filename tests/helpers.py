"""Things several test modules share."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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


class PostgresServer:
    """Debian's PostgreSQL on a Unix socket in a throwaway folder, and one database.

    ``.ci/run`` installs the package and sets ``PRECSEARCH_REQUIRE_POSTGRES`` so that a
    missing server fails instead of skipping. The server refuses to run as root: as root
    it runs as the package's ``postgres`` user, in a folder outside pytest's private
    (0700) temporary tree.
    """

    def __init__(self, port: int, password: str = "") -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        initdb = found[-1] if found else shutil.which("initdb")
        if initdb is None:
            if os.environ.get("PRECSEARCH_REQUIRE_POSTGRES"):
                pytest.fail("no PostgreSQL server binaries: install Debian's postgresql package")
            pytest.skip("no PostgreSQL server binaries (Debian's postgresql package)")
        self.bindir = Path(initdb).parent
        self.folder = Path(tempfile.mkdtemp(prefix="precsearch-pg-"))
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.folder, "postgres")
        self.data, self.port = self.folder / "data", str(port)
        self.pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        self.start()
        self.pg("createdb", "-h", str(self.folder), "-p", self.port, "-U", "postgres", "precsearch")
        # Trust authentication accepts any password: one in the URL tests that it is
        # never shown.
        user = f"postgres:{password}" if password else "postgres"
        self.url = f"postgresql://{user}@/precsearch?host={self.folder}&port={self.port}"

    def pg(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bindir / tool), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.folder} -p {self.port} -c fsync=off"
        log = str(self.folder / "server.log")
        self.pg("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self.pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")

    def close(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped (a test took it down)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
