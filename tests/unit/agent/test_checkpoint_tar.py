"""Packing and unpacking a checkpoint directory (`agent.checkpoint_tar`): what is
stored as what, what is left out, modes, and the size cap applied while packing.

The swap race against a root agent, with real accounts, is in
tests/integration/agent/test_checkpoint_containment.py.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from schedulearn.agent import checkpoints
from schedulearn.agent.checkpoint_tar import CheckpointError, TooLarge, inside, pack, safe_extract

MiB = 1024 * 1024


def _names(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_links_are_stored_as_links_and_only_those_that_stay_inside(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    (src / "blobs").mkdir(parents=True)
    (src / "blobs" / "b1").write_bytes(b"weights")
    (src / "snap").mkdir()
    (src / "snap" / "model.bin").symlink_to("../blobs/b1")  # Hugging Face's cache does this
    (src / "abs").symlink_to("/etc/passwd")
    (src / "up").symlink_to("../../outside")
    (src / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(src / "fifo")
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    result = pack(src, out / "c.tar", 10 * MiB, "too large")
    members = _names(out / "c.tar")
    assert members["snap/model.bin"].issym() and members["snap/model.bin"].linkname == "../blobs/b1"
    assert "abs" not in members and "up" not in members and "fifo" not in members
    assert sorted(result.left_out) == [
        "abs (a link leading outside the directory)",
        "fifo (not a file, folder or link)",
        "up (a link leading outside the directory)",
    ]
    assert result.files == 1
    # The tar is the agent's alone.
    assert stat.S_IMODE((out / "c.tar").stat().st_mode) == 0o600
    restored = tmp_path / "restored"
    restored.mkdir()
    assert safe_extract(out / "c.tar", restored) == 1
    assert (restored / "snap" / "model.bin").read_bytes() == b"weights"
    assert os.readlink(restored / "snap" / "model.bin") == "../blobs/b1"


def test_setuid_bits_are_dropped_when_packing_and_when_restoring(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    tool = src / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o6755)
    out = tmp_path / "c.tar"
    pack(src, out, MiB, "too large")
    assert _names(out)["tool"].mode == 0o755
    # A tar from anywhere else (the server holds what an agent sent) is cleaned too.
    crafted = tmp_path / "crafted.tar"
    with tarfile.open(crafted, "w") as tar:
        info = tarfile.TarInfo("suid")
        info.size, info.mode = 4, 0o4755
        tar.addfile(info, io.BytesIO(b"evil"))
    restored = tmp_path / "restored"
    restored.mkdir()
    safe_extract(crafted, restored)
    assert stat.S_IMODE((restored / "suid").stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another uid (needs root)")
def test_a_file_of_another_user_is_left_out(tmp_path: Path) -> None:
    # What a hard link to someone else's file looks like from the directory.
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "mine").write_bytes(b"mine")
    (src / "theirs").write_bytes(b"their secret")
    os.chown(src / "theirs", 65534, 65534)
    result = pack(src, tmp_path / "c.tar", MiB, "too large")
    assert list(_names(tmp_path / "c.tar")) == ["mine"]
    assert result.left_out == ["theirs (a file of another user)"]


@pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another uid (needs root)")
def test_a_restore_makes_everything_the_jobs_account_from_the_start(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "w").write_bytes(b"w")
    (src / "l").symlink_to("sub/w")
    pack(src, tmp_path / "c.tar", MiB, "too large")
    restored = tmp_path / "restored"
    restored.mkdir()
    assert safe_extract(tmp_path / "c.tar", restored, (65534, 65533)) == 1
    made = [restored, restored / "sub", restored / "sub" / "w", restored / "l"]
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in made} == {(65534, 65533)}
    # The folder itself too (through its descriptor: the agent walks no path
    # after the restore, which a job could swap for a link to /etc).
    assert restored.stat().st_mode & 0o777 == 0o700


def test_a_compressed_archive_is_not_unpacked(tmp_path: Path) -> None:
    """pack writes plain tar; a compressed one could be a decompression bomb."""
    (tmp_path / "f").write_bytes(b"x" * 1000)
    with tarfile.open(tmp_path / "c.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "f", "f")
    (tmp_path / "out").mkdir()
    with pytest.raises(CheckpointError, match="not a plain tar"):
        safe_extract(tmp_path / "c.tar.gz", tmp_path / "out")


@pytest.mark.parametrize(
    ("name", "kind", "linkname"),
    [
        ("../escape", tarfile.REGTYPE, ""),
        ("/etc/evil", tarfile.REGTYPE, ""),
        ("l", tarfile.SYMTYPE, "/etc/passwd"),
        ("d/l", tarfile.SYMTYPE, "../../x"),
        ("h", tarfile.LNKTYPE, "fine"),
        ("dev", tarfile.CHRTYPE, ""),
    ],
)
def test_restore_refuses_what_could_lead_outside(
    tmp_path: Path, name: str, kind: bytes, linkname: str
) -> None:
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        tar.addfile(tarfile.TarInfo("fine"), io.BytesIO(b""))
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, linkname
        tar.addfile(info)
    target = tmp_path / "t"
    target.mkdir()
    with pytest.raises(CheckpointError, match="refusing"):
        safe_extract(archive, target)
    assert list(target.iterdir()) == []  # checked before anything is written


def test_a_file_is_never_written_through_a_link_of_the_archive(tmp_path: Path) -> None:
    # `d` -> `real` (inside), then a file `d/x`: unpacked, `d` is a folder of its
    # own and the link comes last, so it is refused as a second `d`.
    archive = tmp_path / "links.tar"
    with tarfile.open(archive, "w") as tar:
        (link := tarfile.TarInfo("d")).type, link.linkname = tarfile.SYMTYPE, "real"
        tar.addfile(link)
        tar.addfile(tarfile.TarInfo("d/x"), io.BytesIO(b""))
    target = tmp_path / "t"
    (target / "real").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="twice"):
        safe_extract(archive, target)
    assert not (target / "real" / "x").exists()


def test_inside_follows_the_path_of_the_link() -> None:
    assert inside("a/b/l", "../c") and inside("l", "a/../b")
    assert not inside("a/l", "../../x") and not inside("l", "/x") and not inside("l", "")


# Run in a child whose files may not grow past the cap (RLIMIT_FSIZE): writing
# one byte more fails with EFBIG, which `pack` reports as a failed write, not as
# the cap. So "over the server's limit" proves the cap stopped it first.
_CHILD = """
import resource, sys
from pathlib import Path
from schedulearn.agent import checkpoints
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    checkpoints.pack(Path(sys.argv[1]), Path(sys.argv[2]), limit)
except checkpoints.CheckpointError as exc:
    print(exc)
"""


def test_a_sparse_file_over_the_cap_is_refused_before_the_tar_passes_it(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "a-small").write_bytes(b"x" * 300_000)
    with (src / "b-sparse").open("wb") as f:
        f.truncate(3 * 1024**3)  # 3 GiB apparent, no block on disk
    limit = MiB
    into = tmp_path / "c.tar"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(src), str(into), str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "over the server's limit of 1048576 bytes" in done.stdout, done.stdout
    assert "'b-sparse', 3221225472 bytes" in done.stdout
    assert not into.exists()  # nothing half-made is left
    with pytest.raises(TooLarge, match="apparent size"):
        checkpoints.pack(src, into, limit)


def test_a_checkpoint_of_exactly_the_cap_passes(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "w").write_bytes(b"w" * 8000)
    into = tmp_path / "c.tar"
    packed = checkpoints.pack(src, into, 10 * 1024 * 1024)
    assert packed is not None
    size = packed.size_bytes
    into.unlink()
    assert checkpoints.pack(src, into, size) is not None  # the cap counts the whole tar
    into.unlink()
    with pytest.raises(TooLarge):
        checkpoints.pack(src, into, size - 1)


def test_the_tar_is_packed_in_a_folder_only_the_agent_can_enter(tmp_path: Path) -> None:
    folder = checkpoints.pack_folder(tmp_path)
    st = folder.stat()
    assert folder.parent == tmp_path and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()
