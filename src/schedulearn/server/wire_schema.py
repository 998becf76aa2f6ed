"""Write the checked-in wire schema of a protocol version (`scripts/wire-schema`).

The live wire is this checkout's server's OpenAPI document, cut down by
`protocol_schema.compact`. With no arguments, the current version's file
(`schedulearn/wire/protocol-<PROTOCOL_VERSION>.json`) is written when it
does not exist yet (a new version) or already matches; when the wire has
changed within the version, the changes are listed and nothing is written
unless every one is compatible and `--note` says why it is (the note and
the new digest are added to the file's record). A change that needs a new
version is never written into an existing file: raise `PROTOCOL_VERSION`
(and declare the calls it adds in `protocol_calls.SINCE`) first.

`--commit SHA --protocol N` writes version N's file from the server of an
older commit (taken with `git archive`, run with this environment's
packages), which is how protocol 1 and 2 were recorded.

It owns no state; it runs the server's app factory on a throwaway SQLite
file and never starts it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from schedulearn import protocol_schema
from schedulearn.protocol import PROTOCOL_VERSION

WIRE = Path(__file__).resolve().parents[1] / "wire"

# Run in a separate interpreter for an older commit (its own `schedulearn` on
# PYTHONPATH); the app's settings and factory have had these names since 0.1.0.
_DUMP = """
import json, sys, tempfile
from schedulearn.settings import ServerSettings
from schedulearn.server.app import create_app
folder = tempfile.mkdtemp()
app = create_app(ServerSettings(database_url=f"sqlite:///{folder}/wire.db"))
json.dump(app.openapi(), sys.stdout)
"""


def live_openapi() -> dict[str, Any]:
    """This checkout's server's OpenAPI document."""
    from schedulearn.server.app import create_app
    from schedulearn.settings import ServerSettings

    with tempfile.TemporaryDirectory() as folder:
        app = create_app(ServerSettings(database_url=f"sqlite:///{folder}/wire.db"))
        return app.openapi()


def live() -> protocol_schema.Schema:
    """This checkout's wire, in `compact` form."""
    return protocol_schema.compact(live_openapi())


def openapi_of_commit(commit: str, repo: Path) -> dict[str, Any]:
    """The OpenAPI document of the server at `commit` of the git checkout `repo`."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", commit, "src"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": str(Path(folder) / "src")}
        done = subprocess.run(
            [sys.executable, "-c", _DUMP], capture_output=True, text=True, env=env, timeout=300
        )
        if done.returncode != 0:
            raise SystemExit(f"the server of {commit} did not build:\n{done.stderr[-3000:]}")
        loaded: dict[str, Any] = json.loads(done.stdout)
        return loaded


def record(version: int, wire: protocol_schema.Schema, **origin: str) -> protocol_schema.Schema:
    """A new version's file: its wire, the digest it was made with, and what
    changed since the version before (for people; the tests read the wires)."""
    previous = protocol_schema.checked_in(version - 1)
    since = [] if previous is None else protocol_schema.changes(previous, wire)
    return {
        "protocol": version,
        **origin,
        "made": protocol_schema.digest(wire),
        "notes": [],
        "changes_since_previous": [str(change) for change in since],
        "calls": wire["calls"],
        "models": wire["models"],
    }


def write(version: int, content: protocol_schema.Schema) -> Path:
    path = WIRE / protocol_schema.file_name(version)
    path.write_text(json.dumps(content, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def update(wire: protocol_schema.Schema, version: int, note: str | None) -> tuple[int, str]:
    """Write `wire` as `version`'s file when allowed: (exit status, what was done)."""
    path = WIRE / protocol_schema.file_name(version)
    if not path.exists():
        write(version, record(version, wire))
        return 0, f"wrote {path} (protocol {version}, new)"
    current = json.loads(path.read_text(encoding="utf-8"))
    problem = protocol_schema.record_problem(current)
    if problem is not None:
        return 1, f"{problem}; restore it from git first (git checkout -- {path})"
    found = protocol_schema.changes(current, wire)
    if not found:
        return 0, f"{path} is up to date"
    if not note or not all(c.compatible for c in found):
        return 1, advice(path.name, found, version)
    notes = [*current.get("notes", []), {"note": note, "digest": protocol_schema.digest(wire)}]
    write(version, {**current, "notes": notes, "calls": wire["calls"], "models": wire["models"]})
    return 0, f"wrote {path} with the note ({len(found)} compatible changes)"


def advice(name: str, found: list[protocol_schema.Change], version: int) -> str:
    """What to do when the live wire differs from version `version`'s file `name`."""
    listing = "\n".join(f"  {c}" for c in found)
    if not all(c.compatible for c in found):
        return (
            f"the wire differs from {name}, and not compatibly:\n{listing}\n"
            f"raise PROTOCOL_VERSION in schedulearn/protocol.py (and cli/client.py) to "
            f"{version + 1}, declare the calls it adds in protocol_calls.SINCE, and run "
            "scripts/wire-schema to write its file"
        )
    return (
        f"the wire differs from {name}, compatibly:\n{listing}\n"
        "record it with scripts/wire-schema --note 'what changed and why no peer "
        f"notices', or raise PROTOCOL_VERSION to {version + 1}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/wire-schema", description=__doc__)
    parser.add_argument("--note", help="why the change to the current version is compatible")
    parser.add_argument("--commit", help="record the wire of this older commit's server")
    parser.add_argument("--protocol", type=int, help="the version --commit spoke")
    args = parser.parse_args(argv)
    if args.commit:
        if args.protocol is None:
            parser.error("--commit needs --protocol (the version that commit spoke)")
        repo = Path(__file__).resolve().parents[3]
        wire = protocol_schema.compact(openapi_of_commit(args.commit, repo))
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", args.commit],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        print(f"wrote {write(args.protocol, record(args.protocol, wire, commit=commit))}")
        return 0
    status, said = update(live(), PROTOCOL_VERSION, args.note)
    print(said, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
