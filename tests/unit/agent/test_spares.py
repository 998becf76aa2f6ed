"""Spare directories: a finished job's directory is reused (same inodes, files
emptied) unless something of its own is in it or another process still holds
one of its files open; the pool keeps at most `limit` and survives a restart."""

from __future__ import annotations

import subprocess
from pathlib import Path

from schedulearn.agent.spares import SparePool

KEEP = frozenset({"stdout.log", "stderr.log", "exit_code"})


def finished_job(root: Path, name: str) -> Path:
    job = root / name
    job.mkdir()
    (job / "stdout.log").write_text("secret output of the last job\n")
    (job / "stderr.log").write_text("")
    (job / "exit_code").write_text("0\n")
    return job


def test_a_finished_job_dir_is_reused_with_its_files_emptied(tmp_path: Path) -> None:
    pool = SparePool(tmp_path / "spare", keep=KEEP)
    old = finished_job(tmp_path, "1.1")
    inode = (old / "stdout.log").stat().st_ino
    pool.remove(old)
    assert not old.exists() and len(pool) == 1
    new = tmp_path / "2.1"
    pool.make(new)
    assert (new / "stdout.log").stat().st_ino == inode
    assert sorted(p.name for p in new.iterdir()) == sorted(KEEP)
    assert all(p.stat().st_size == 0 for p in new.iterdir())
    assert len(pool) == 0
    pool.make(tmp_path / "3.1")  # none left: a new directory
    assert list((tmp_path / "3.1").iterdir()) == []


def test_a_blank_file_is_overwritten_with_spaces_and_the_next_code_lands_in_place(
    tmp_path: Path,
) -> None:
    pool = SparePool(tmp_path / "spare", keep=KEEP, blank=frozenset({"exit_code"}))
    old = finished_job(tmp_path, "1.1")
    (old / "exit_code").write_text(" 137\n")
    pool.remove(old)
    new = tmp_path / "2.1"
    pool.make(new)
    # The exit code is gone (no number left to read), the file not truncated.
    assert (new / "exit_code").read_text() == "    \n"
    assert (new / "stdout.log").stat().st_size == 0
    # The shim's write lands over the blanks (no truncation).
    shim = 'true; c=$?; printf "%4d\\n" "$c" 1<>"$0"'
    subprocess.run(["/bin/sh", "-c", shim, str(new / "exit_code")], check=True)
    assert int((new / "exit_code").read_text()) == 0


def test_a_file_another_process_holds_open_is_never_reused(tmp_path: Path) -> None:
    pool = SparePool(tmp_path / "spare", keep=KEEP)
    job = finished_job(tmp_path, "1.1")
    # A stray process that escaped its job's process group, still writing.
    with (job / "stdout.log").open("ab") as out:
        stray = subprocess.Popen(["sleep", "30"], stdout=out)
    try:
        pool.remove(job)
        assert not job.exists() and len(pool) == 0
    finally:
        stray.kill()
        stray.wait()


def test_a_dir_holding_anything_else_is_deleted(tmp_path: Path) -> None:
    pool = SparePool(tmp_path / "spare", keep=KEEP)
    job = finished_job(tmp_path, "1.1")
    (job / "checkpoint.tar").write_bytes(b"x")
    pool.remove(job)
    empty_only = SparePool(tmp_path / "empty")
    full, empty = tmp_path / "ck1", tmp_path / "ck2"
    full.mkdir()
    (full / "model.pt").write_bytes(b"weights")
    empty.mkdir()
    empty_only.remove(full)
    empty_only.remove(empty)
    assert not job.exists() and len(pool) == 0
    assert not full.exists() and not empty.exists() and len(empty_only) == 1


def test_the_pool_is_bounded_and_outlives_the_agent(tmp_path: Path) -> None:
    pool = SparePool(tmp_path / "spare", keep=KEEP, limit=2)
    for i in range(3):
        pool.remove(finished_job(tmp_path, f"{i}.1"))
    assert len(pool) == 2
    again = SparePool(tmp_path / "spare", keep=KEEP, limit=2)
    assert len(again) == 2
    again.remove(finished_job(tmp_path, "9.1"))
    again.make(tmp_path / "10.1")
    again.make(tmp_path / "11.1")
    assert len(again) == 0
    assert all((tmp_path / n / "exit_code").exists() for n in ("10.1", "11.1"))
