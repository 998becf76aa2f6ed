"""Users as the rest of the server needs them: whom a user's jobs run as.

PLACEHOLDER (branch `runas`): the identity helper's branch replaces this
module with users as records (`schedulearn user add NAME --unix-account
ACCOUNT`, allow-root). Only `unix_account_of` is used here, with this
name and signature; at merge keep theirs.

The documented default: a user's unix account is their user name, and
no user's jobs may run as root.
"""

from __future__ import annotations

from sqlmodel import Session

from schedulearn.protocol import UNIX_NAME_MAX, RunAs


def unix_account_of(session: Session, user_name: str) -> RunAs | None:
    """The unix account `user_name`'s jobs run as on an agent started as root;
    None when the user has none (such agents then do not take their jobs)."""
    del session  # the records that will be read live in the identity branch
    if not user_name or len(user_name) > UNIX_NAME_MAX:
        return None
    return RunAs(account=user_name, allow_root=False)
