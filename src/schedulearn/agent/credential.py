"""The node credential the agent keeps in its state directory, and where a secret comes from.

Owns `<state_dir>/credential.json` (mode 0600, in a 0700 directory): the
credential the server gave this node for a join token (`schedulearn node
add`), or that `schedulearn up` made for its local agent. It records the
node it is bound to and the SHA-256 of the join token it came from, so an
agent restarted with the same `--join-token-file` uses the stored
credential instead of spending the (single-use) token again, while a new
join token enrolls the node afresh.

Secrets never need the command line (where any local user reads them in
`/proc/<pid>/cmdline`): `read_secret_file` reads them from a file, and
the agent command takes them from the environment too.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "credential.json"


class CredentialError(RuntimeError):
    """A credential or secret file that cannot be used; the message says what to change."""


@dataclass(frozen=True, slots=True)
class StoredCredential:
    node: str
    credential: str
    join_digest: str = ""  # sha256 of the join token it came from ("" if none)


def join_digest(join_token: str) -> str:
    return hashlib.sha256(join_token.encode()).hexdigest()


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def load(state_dir: Path) -> StoredCredential | None:
    path = path_in(state_dir)
    try:
        data = json.loads(path.read_text())
        return StoredCredential(
            node=str(data["node"]),
            credential=str(data["credential"]),
            join_digest=str(data.get("join_digest", "")),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CredentialError(
            f"cannot read the node credential in {path} ({exc}); delete it and enroll the "
            "node again (`schedulearn node add NAME`, then --join-token-file)"
        ) from exc


def save(state_dir: Path, stored: StoredCredential) -> Path:
    """Write the credential 0600 (never readable by others, not even for a moment)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = path_in(state_dir)
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(
                {
                    "node": stored.node,
                    "credential": stored.credential,
                    "join_digest": stored.join_digest,
                },
                out,
            )
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)  # whatever the umask
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_secret_file(path: Path, what: str) -> str:
    """A token kept in a file (its first line, stripped)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CredentialError(f"cannot read the {what} file {path}: {exc.strerror}") from exc
    secret = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise CredentialError(f"the {what} file {path} is empty")
    return secret
