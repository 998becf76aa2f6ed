"""Freeing the read part of a file a job still appends to (`executors.holes`)."""

from __future__ import annotations

import os
from pathlib import Path

from schedulearn.agent.executors import holes


def test_punching_frees_the_start_and_keeps_offsets_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    job = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # the job's descriptor
    chunk = b"".join(b"%07d\n" % i for i in range(1 << 16))  # 512 KiB of numbered lines
    os.write(job, chunk * 2)
    os.fsync(job)
    before = path.stat().st_blocks * 512
    agent = os.open(path, os.O_WRONLY)
    try:
        freed = holes.punch(agent, len(chunk) + 100)
    finally:
        os.close(agent)
    # Whole blocks only, up to the offset given.
    assert freed == len(chunk) + 100 - (len(chunk) + 100) % holes.BLOCK
    after = path.stat().st_blocks * 512
    assert before - after >= len(chunk)
    # Size and offsets stay; what was after the hole is intact; appends go on at the end.
    os.write(job, b"more\n")
    os.close(job)
    data = path.read_bytes()
    assert len(data) == 2 * len(chunk) + 5
    assert data[:freed] == b"\0" * freed
    assert data[freed:] == (chunk * 2)[freed:] + b"more\n"


def test_nothing_is_freed_short_of_a_whole_block(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_WRONLY)
    try:
        assert holes.punch(fd, holes.BLOCK - 1) == 0
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 100
