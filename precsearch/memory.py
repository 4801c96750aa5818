"""Peak memory of a trial: the process's resident set on a CPU, device memory on a GPU."""

from __future__ import annotations

import resource
from typing import Any

__all__ = ["PeakMemory"]


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
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class PeakMemory:
    """The peak memory from now on: ``PeakMemory(tf, gpu)``, then :meth:`mb`.

    Attributes:
        kind: ``"gpu"``, ``"rss"``, or ``"rss (process lifetime)"`` where the kernel's
            peak mark cannot be reset.
    """

    def __init__(self, tf: Any, gpu: bool) -> None:
        self._tf = tf
        self.gpu = gpu
        if gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")
            self.kind = "gpu"
        else:
            self.kind = "rss" if _reset_peak_rss() else "rss (process lifetime)"

    def mb(self) -> float:
        """The peak since this object was made, in MiB."""
        if self.gpu:
            return self._tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        return _peak_rss_mb()
