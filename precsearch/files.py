"""Files that other processes read, written so that none of them sees half a file."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["folder_atomic", "write_text_atomic"]

# A temporary folder untouched for this long was left by a process killed while writing
# it (writing one takes seconds at most).
_STALE_SECONDS = 3600.0


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write a file so that a reader (another process) never sees half of it.

    The text goes to a temporary file beside ``path``, synced to disk, then renamed over
    ``path`` (the folder is synced too, where the system allows): after a crash ``path``
    holds the old text or the new, whole. The temporary file is removed on any failure.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; what a failure left
    _fsync_folder(path.parent)
    return path


@contextmanager
def folder_atomic(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Fill a folder so that it is there whole or not at all.

    Yields a temporary sibling folder to write into, renamed to ``path`` when the block
    ends without error and removed when it does not (an interrupted write leaves no
    ``path``, so it is done again next time). Should ``path`` exist by the end (another
    process wrote it meanwhile), that one is kept. Temporary folders for ``path`` that
    killed processes left behind are removed first.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if path.parent.is_dir():
        for left in path.parent.glob(f".{path.name}.*.tmp"):
            if left == tmp or time.time() - left.stat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(left, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
        _fsync_folder(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync_folder(folder: Path) -> None:
    # Makes a rename inside ``folder`` durable; best effort (not every system or file
    # system lets a folder be opened or synced).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
