"""Atomic writes: a reader sees a whole file or folder, or the old one, never a part."""

from __future__ import annotations

import os
import stat

import pytest

from precsearch import files
from precsearch.files import folder_atomic, write_text_atomic


def test_write_text_atomic_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    assert write_text_atomic(path, "new ü") == path
    assert path.read_text(encoding="utf-8") == "new ü"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "half \ud800 a text")  # fails while writing
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(*args):
        raise PermissionError("refused")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        write_text_atomic(tmp_path / "a.json", "text")
    assert list(tmp_path.iterdir()) == []


def test_the_file_is_synced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd):
        info = os.fstat(fd)
        events.append(("fsync", info.st_ino, stat.S_ISDIR(info.st_mode)))
        fsync(fd)

    def spy_replace(src, dst):
        events.append(("replace", os.stat(src).st_ino, False))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    path = write_text_atomic(tmp_path / "a.json", "text")
    inode = path.stat().st_ino
    assert events == [
        ("fsync", inode, False),
        ("replace", inode, False),
        ("fsync", tmp_path.stat().st_ino, True),
    ]


def test_folder_atomic_is_there_whole_or_not_at_all(tmp_path):
    path = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), folder_atomic(path) as folder:
        (folder / "half").write_text("x")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with folder_atomic(path) as folder:
        (folder / "whole").write_text("x")
        assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert [p.name for p in path.iterdir()] == ["whole"]


def test_folder_atomic_keeps_a_folder_written_meanwhile(tmp_path):
    path = tmp_path / "run"
    with folder_atomic(path) as folder:
        (folder / "mine").write_text("x")
        path.mkdir()
        (path / "theirs").write_text("x")  # another process finished first
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert [p.name for p in path.iterdir()] == ["theirs"]


def test_folder_atomic_removes_what_a_killed_process_left(tmp_path):
    stale, live = tmp_path / ".run.1.tmp", tmp_path / ".run.2.tmp"
    stale.mkdir()
    live.mkdir()
    old = os.stat(stale).st_mtime - files._STALE_SECONDS - 1
    os.utime(stale, (old, old))
    with folder_atomic(tmp_path / "run"):
        pass
    # A recent one may belong to a process still writing it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.2.tmp", "run"]
