"""Memory of a trial and of the worker: peaks, the resident set, and giving it back.

A trial's peak is the process's resident set on a CPU, device memory on a GPU. A worker
runs many trials, and TensorFlow keeps a little of every traced training step for good
(measured here: ~3 MB a trial on a small MLP, ~60 MB on MobileNetV3Small, even with
``keras.backend.clear_session()``), so after each trial the worker collects garbage and
hands freed heap back to the system (:func:`release`), and its parent restarts it when
its resident set has grown too far (:class:`precsearch.study.executors.Worker`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precsearch.backend import Backend

__all__ = ["PeakMemory", "release", "rss_mb"]


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from ``/proc/self/status`` (``VmRSS``: now,
    ``VmHWM``: the peak), in MiB; ``None`` where /proc is missing."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """This process's resident memory now, in MiB (0 where /proc is missing)."""
    return _status_mb("VmRSS") or 0.0


def release() -> None:
    """Free what the last trial left behind: cyclic garbage (a Keras model and its traced
    functions refer to each other), then the heap glibc keeps after freeing it."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux ≥ 4.0), so that a peak is per trial."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float:
    """Peak resident memory since the last reset (or of the process), in MiB."""
    peak = _status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class PeakMemory:
    """The peak memory from now on: ``PeakMemory(backend, gpu)``, then :meth:`mb`.

    Attributes:
        kind: ``"gpu"``, ``"rss"``, or ``"rss (process lifetime)"`` where the kernel's
            peak mark cannot be reset.
    """

    def __init__(self, backend: Backend, gpu: bool) -> None:
        self._backend = backend
        self.gpu = gpu
        if gpu:
            backend.reset_peak_memory()
            self.kind = "gpu"
        else:
            self.kind = "rss" if _reset_peak_rss() else "rss (process lifetime)"

    def mb(self) -> float:
        """The peak since this object was made, in MiB."""
        if self.gpu:
            return self._backend.peak_memory_bytes() / 2**20
        return _peak_rss_mb()
