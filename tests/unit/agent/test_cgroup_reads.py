"""Whether a run's cgroup is empty, when its files cannot be read (`agent.cgroups`).

A cgroup that is gone reads as empty (its run has ended); one whose files
cannot be read must not: the run would end and its GPUs be given to the next
job with its processes still inside. The failed read is a real one: a
directory stands where the kernel's file would be, so reading it fails with
EISDIR (as root, file permissions would not make it fail).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from schedulearn.agent import cgroups
from schedulearn.agent.cgroups import RunCgroup


def test_a_cgroup_whose_directories_are_gone_is_empty(tmp_path: Path) -> None:
    assert RunCgroup([str(tmp_path / "removed")]).empty()


def test_a_cgroup_listing_no_process_is_empty_and_one_listing_a_process_is_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "cgroup.procs").write_text("")
    assert RunCgroup([str(tmp_path)]).empty()
    (tmp_path / "cgroup.procs").write_text("4242\n")
    assert not RunCgroup([str(tmp_path)]).empty()


@pytest.mark.parametrize("name", ["cgroup.events", "cgroup.procs"])
def test_a_cgroup_whose_membership_cannot_be_read_is_not_empty(tmp_path: Path, name: str) -> None:
    v1_dir = tmp_path / "freezer"
    v1_dir.mkdir()
    (v1_dir / "cgroup.procs").write_text("")
    unreadable = tmp_path / "memory"
    (unreadable / name).mkdir(parents=True)  # open() then read() fails: EISDIR
    assert not RunCgroup([str(v1_dir), str(unreadable)]).empty()


def test_read_raises_a_failure_other_than_a_missing_file(tmp_path: Path) -> None:
    assert cgroups.read(str(tmp_path / "missing")) == ""
    (tmp_path / "cgroup.procs").mkdir()
    with pytest.raises(OSError) as failed:
        cgroups.read(str(tmp_path / "cgroup.procs"))
    assert failed.value.errno == errno.EISDIR


def test_a_listing_that_fails_leaves_out_only_that_directory(tmp_path: Path) -> None:
    """A kill round lists members as far as it can (every v1 directory holds them all)."""
    readable = tmp_path / "freezer"
    readable.mkdir()
    (readable / "cgroup.procs").write_text("4242\n")
    (tmp_path / "memory" / "cgroup.procs").mkdir(parents=True)
    assert RunCgroup([str(readable), str(tmp_path / "memory")]).pids() == {4242}
