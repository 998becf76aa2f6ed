"""Whom a job runs as (`agent.accounts`): the checks made when a job starts,
and the accounts a root agent reports."""

from __future__ import annotations

import os
import pwd

import pytest

from schedulearn.agent.accounts import AccountError, JobsAs, for_job, node_accounts
from schedulearn.protocol import Assignment, RunAs


def assignment(run_as: RunAs | None) -> Assignment:
    return Assignment(job_id=1, attempt=1, user="alice", command="true", run_as=run_as)


def missing_name() -> str:
    name = "no-such-account-here"
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
    return name


def test_an_agent_that_runs_jobs_as_itself_ignores_the_owner() -> None:
    assert for_job(JobsAs.AGENT, assignment(RunAs(account=missing_name())), "n1") is None
    assert for_job(JobsAs.AGENT, assignment(None), "n1") is None


def test_an_account_missing_on_the_node_fails_the_job_saying_so() -> None:
    name = missing_name()
    with pytest.raises(AccountError, match=f"unix account '{name}'.*does not exist on node 'n1'"):
        for_job(JobsAs.OWNER, assignment(RunAs(account=name)), "n1")


def test_an_owner_without_an_account_fails_the_job_saying_so() -> None:
    with pytest.raises(AccountError, match="user 'alice' has no unix account"):
        for_job(JobsAs.OWNER, assignment(None), "n1")


def test_root_only_when_the_admin_allowed_it() -> None:
    with pytest.raises(AccountError, match="would run as root"):
        for_job(JobsAs.OWNER, assignment(RunAs(account="root")), "n1")
    account = for_job(JobsAs.OWNER, assignment(RunAs(account="root", allow_root=True)), "n1")
    assert account is not None and account.uid == 0


def test_an_existing_account_is_looked_up_with_its_groups_and_home() -> None:
    me = pwd.getpwuid(os.getuid())
    account = for_job(JobsAs.OWNER, assignment(RunAs(account=me.pw_name, allow_root=True)), "n1")
    assert account is not None
    assert (account.uid, account.gid, account.home) == (me.pw_uid, me.pw_gid, me.pw_dir)
    assert me.pw_gid in account.groups
    assert account.env()["USER"] == me.pw_name and account.env()["HOME"] == me.pw_dir


def test_the_node_reports_login_accounts_and_root_not_system_ones() -> None:
    names = node_accounts()
    assert "root" in names
    for entry in pwd.getpwall():
        shell = os.path.basename(entry.pw_shell)
        if 0 < entry.pw_uid < 1000 or shell in ("nologin", "false"):
            assert entry.pw_name not in names
