"""Whom a job runs as on this host: its owner's unix account, or the agent's own user.

Two ways to run an agent (`schedulearn agent --run-jobs-as`):

- `owner` (the default for an agent started as root): each job runs as
  its owner's unix account, which the server sends with the assignment
  (`Assignment.run_as`): that uid, gid and supplementary groups, with
  HOME, USER and LOGNAME of the account, never as root unless the admin
  allowed it for the user (`RunAs.allow_root`). The agent reports the
  accounts its host has (`node_accounts`) as a node capability, so the
  scheduler places a job only where its owner's account exists; an
  account removed after that fails the job at start with a message
  saying so.
- `agent` (the default for an agent started as an ordinary user, and the
  local agent of `schedulearn up`): every job runs as the agent's own
  user, whoever owns it, and the node reports no accounts (any job may
  go there). Tenants are then not separated from each other: for a
  single user's machine, or one unprivileged agent account per node.

This module owns that choice and the look-up of an account; the
executors run a job as the `Account` they are given, and the state
store gives that account the files the job must write (its exit file,
progress file and checkpoint directory), nothing else.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from schedulearn.protocol import Assignment

# Accounts a root agent reports: ordinary users (uid 1000 and up, the
# Debian/Red Hat UID_MIN) with a login shell, and root (present on every
# host; a job runs as it only when the admin allowed that for its user).
FIRST_USER_UID = 1000
_NO_LOGIN = ("nologin", "false", "sync", "halt", "shutdown")
# The umask a job starts with: its files are its owner's to write, others read.
JOB_UMASK = 0o022


class JobsAs(StrEnum):
    """Whom the agent runs jobs as."""

    OWNER = "owner"
    AGENT = "agent"


def default_jobs_as() -> JobsAs:
    """Owners' accounts for an agent started as root, else the agent's own user."""
    return JobsAs.OWNER if os.geteuid() == 0 else JobsAs.AGENT


class AccountError(RuntimeError):
    """A job cannot run as its owner here; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Account:
    """A unix account a job runs as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    def env(self) -> dict[str, str]:
        """The variables a login as the account would set (over the agent's own)."""
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "SHELL": self.shell or "/bin/sh",
        }


def lookup(name: str) -> Account | None:
    """The account `name` on this host, or None when it has none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
        home=entry.pw_dir,
        shell=entry.pw_shell,
    )


def for_job(jobs_as: JobsAs, assignment: Assignment, node: str) -> Account | None:
    """The account `assignment` runs as here; None: as the agent's own user.

    Raises `AccountError` when the job must not start: its owner has no
    unix account, the account is missing on this host, or it is root and
    the admin did not allow that.
    """
    if jobs_as is JobsAs.AGENT:
        return None
    owner = assignment.user or "(unknown)"
    run_as = assignment.run_as
    if run_as is None:
        raise AccountError(
            f"user {owner!r} has no unix account (no user record, or a disabled one), and "
            f"the agent on {node!r} runs every job as its owner's account; ask an admin to "
            f"add the user (schedulearn user add {owner} --unix-account ACCOUNT) or enable "
            f"them (schedulearn user enable {owner})"
        )
    account = lookup(run_as.account)
    if account is None:
        raise AccountError(
            f"unix account {run_as.account!r} (user {owner!r}'s jobs run as it) does not "
            f"exist on node {node!r}; create it there (useradd {run_as.account}) or ask an "
            "admin to set the user's unix account"
        )
    if account.uid == 0 and not run_as.allow_root:
        raise AccountError(
            f"user {owner!r}'s jobs would run as root (account {run_as.account!r}), which "
            f"the agent on {node!r} refuses; give the user an ordinary unix account, or "
            "have an admin allow root for the user"
        )
    return account


def node_accounts() -> frozenset[str]:
    """The accounts a root agent reports: uid >= 1000 with a login shell, and root."""
    names = {"root"}
    for entry in pwd.getpwall():
        shell = os.path.basename(entry.pw_shell or "")
        if entry.pw_uid >= FIRST_USER_UID and shell and shell not in _NO_LOGIN:
            names.add(entry.pw_name)
    return frozenset(names)


def give(path: str | Path, account: Account | None, mode: int = 0o700) -> None:
    """Make `path` (a file or directory the job writes) its account's, `mode`.

    Never follows a link: a job's own directory may hold links it made.
    """
    if account is not None:
        os.chown(path, account.uid, account.gid, follow_symlinks=False)
    os.chmod(path, mode)


def job_file(path: str | Path, account: Account | None) -> None:
    """Create file `path` for the job to write (or take the one a reused
    directory has): its account's, 0600.

    The job's directory itself stays the agent's, so the job can write
    this file but not replace it with a link the agent would then follow.
    Not truncated: a reused directory's files were emptied or blanked when
    it was set aside (`spares`), and truncating an exit file ext4 has not
    written yet waits for the disk.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if account is not None:
            os.fchown(fd, account.uid, account.gid)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def unreachable_ancestor(path: Path) -> Path | None:
    """The first folder above `path` that other users cannot enter (no x bit for
    others), or None. Jobs run as their owners reach their files under the
    agent's state directory by path, so every folder above it must let them."""
    for folder in reversed(path.resolve().parents):
        try:
            if not folder.stat().st_mode & 0o001:
                return folder
        except FileNotFoundError:
            return None  # the rest is made by the agent (StateStore), enterable
    return None
