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


def tiny_model(*layers, features: int = 8, compiled: bool = True, optimizer=None, name=None):
    """The small test models' scaffold: ``features`` inputs through ``layers`` (by
    default a ReLU ``hidden`` layer of 16 and 2 ``logits``), compiled with sparse
    cross-entropy on logits unless not ``compiled`` (for the notebook API, which takes
    the compile arguments apart). Model files beside ``MODELS`` use it too. The default
    optimizer (Adam at 1e-2) makes the loss fall clearly within a test's few steps, so
    that FP32's runs can judge a candidate there."""
    import keras

    optimizer = optimizer or keras.optimizers.Adam(1e-2)

    layers = layers or (
        keras.layers.Dense(16, activation="relu", name="hidden"),
        keras.layers.Dense(2, name="logits"),
    )
    model = keras.Sequential([keras.Input((features,)), *layers], name=name)
    if compiled:
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def sign_data(n: int = 256, features: int = 8):
    """``n`` examples of ``features`` normal inputs (seed 0), labelled by whether the
    first is positive: data the tiny models learn in a few steps."""
    import numpy as np

    x = np.random.default_rng(0).normal(size=(n, features)).astype("float32")
    return x, (x[:, 0] > 0).astype("int64")


def run_cli(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 600,
    python: str | Path = sys.executable,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``precsearch ARGS`` in a fresh process, as a user runs it (with ``python``, in
    ``env`` if given)."""
    return subprocess.run(
        [str(python), "-m", "precsearch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
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


class ScalarPoint:
    """One point of a TensorBoard scalar: its step and value."""

    def __init__(self, event) -> None:
        from tensorboard.util.tensor_util import make_ndarray

        self.step = event.step
        self.value = float(make_ndarray(event.tensor_proto))


def tensorboard_scalars(folder: Path) -> dict[str, list[ScalarPoint]]:
    """Tag -> points of the TensorBoard run in ``folder``, read with TensorBoard's own
    reader. Its writer stores scalars as tensor summaries of the scalars plugin (what
    its scalar dashboard reads)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})  # keep all
    events.Reload()
    out = {}
    for tag in events.Tags()["tensors"]:
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":  # not hparams
            out[tag] = [ScalarPoint(e) for e in events.Tensors(tag)]
    return out
