"""A job cannot use its checkpoint to make the root agent read another user's files.

Two real unix accounts (`useradd`, removed with `userdel -r` whatever
happens): a victim with 0600 files in its 0700 home, and the job's owner,
whose checkpoint directory the agent (this process, root) packs. The
checkpoint holds a folder of the owner's files named as the victim's are.
While the agent packs, a thread swaps that folder with a link to the
victim's home, again and again (`renameat2(RENAME_EXCHANGE)` through
ctypes): the attack of issue 33, which got 45 of a user's files into a tar
in 30 runs of the agent's former `rglob` + `tar.add`. 100 packs: not one
byte of the victim's files in any tar, and the swap is seen both ways (the
race was live).

Needs root (to make accounts), as CI runs.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dependencies import need_root
from schedulearn.agent import checkpoints

RENAME_EXCHANGE = 2
AT_FDCWD = -100
RUNS = 100
SECRET = b"victim-private-" + secrets.token_hex(8).encode()


@pytest.fixture
def accounts() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    need_root("makes unix accounts and packs as root")
    names = [f"slc{os.getpid() % 100000}{secrets.token_hex(3)}{r}" for r in "vj"]
    try:
        for name in names:
            subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
        yield pwd.getpwnam(names[0]), pwd.getpwnam(names[1])
    finally:
        for name in names:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


def _renameat2() -> Callable[..., int]:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2: Callable[..., int] = fn
    return renameat2


def test_the_swap_race_leaks_nothing_of_another_user(
    accounts: tuple[pwd.struct_passwd, pwd.struct_passwd],
) -> None:
    victim, owner = accounts
    home = Path(victim.pw_dir)
    home.chmod(0o700)
    private = home / "private.txt"
    private.write_bytes(SECRET)
    os.chown(private, victim.pw_uid, victim.pw_gid)
    private.chmod(0o600)
    for name in ("a", "b", "c"):  # more than one file to read: a wider window
        (home / name).write_bytes(SECRET)
        os.chown(home / name, victim.pw_uid, victim.pw_gid)

    base = Path(tempfile.mkdtemp(prefix="schedulearn-race-"))
    try:
        ckpt = base / "ckpt"
        (ckpt / "sub").mkdir(parents=True)
        # The job's own files under the victim's names: a check made on the
        # job's file (its owner, its type) then passes for the victim's.
        for name in ("private.txt", "a", "b", "c"):
            (ckpt / "sub" / name).write_bytes(b"decoy" * 100)
        (ckpt / "swap").symlink_to(home)  # what the job swaps in for `sub`
        for path in (ckpt, ckpt / "sub", *(ckpt / "sub").iterdir(), ckpt / "swap"):
            os.chown(path, owner.pw_uid, owner.pw_gid, follow_symlinks=False)
        work = base / "work"
        work.mkdir(mode=0o700)

        rename = _renameat2()
        stop = threading.Event()
        swaps = 0

        def swap() -> None:
            nonlocal swaps
            a, b = str(ckpt / "sub").encode(), str(ckpt / "swap").encode()
            while not stop.is_set():
                if rename(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                    swaps += 1

        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        seen_link = seen_folder = 0
        try:
            for run in range(RUNS):
                into = work / f"{run}.tar"
                packed = checkpoints.pack(ckpt, into)
                if packed is None:
                    continue  # `sub` was a link for the whole walk: nothing to carry
                with tarfile.open(into) as tar:
                    for m in tar.getmembers():
                        if m.isfile():
                            data = tar.extractfile(m)
                            assert data is not None and SECRET not in data.read(), m.name
                        if m.issym():
                            assert not m.linkname.startswith("/"), m.linkname
                seen_link += any("a link leading outside" in x for x in packed.left_out)
                seen_folder += packed.files > 0
                into.unlink()
        finally:
            stop.set()
            swapper.join()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    # The race ran: the folder was swapped under the packer both ways.
    assert swaps > RUNS, swaps
    assert seen_link and seen_folder, (seen_link, seen_folder)
