"""The CLI's connection settings: server address(es) and token.

Owns the file `<user config dir>/schedulearn/cli.json` (written by
`schedulearn up`). Precedence, highest first: command-line flags, the
environment (`SCHEDULEARN_SERVER`, `SCHEDULEARN_TOKEN`), the file, the
default address.

The server may be several replicas of one server: a comma-separated list
in the flag or the environment (`http://a:8642,http://b:8642`), or a JSON
list in the file (`"server": ["http://a:8642", "http://b:8642"]`). The
resolved `server` is the comma-separated list; the client fails over
along it (`cli.http`, `schedulearn.failover`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from schedulearn.failover import ServerListError, parse_servers

DEFAULT_SERVER = "http://127.0.0.1:8642"


# A dataclass, not a pydantic model: every command against a server reads
# this file, and pydantic alone takes longer to import than a command may
# take to start (issue 15).
@dataclass(frozen=True)
class CliConfig:
    server: str = DEFAULT_SERVER
    token: str | None = None
    # The agent token `schedulearn up` made for its local agent (reused next time).
    agent_token: str | None = None

    @classmethod
    def from_json(cls, text: str) -> CliConfig:
        """The file's content; ValueError says what is wrong (unknown keys are ignored)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        # The file may list replicas as a JSON list; kept as one comma-separated string.
        server = data.get("server")
        if isinstance(server, list) and all(isinstance(v, str) for v in server):
            data["server"] = ",".join(server)
        for key in ("server", "token", "agent_token"):
            value = data.get(key)
            if (
                key in data
                and not isinstance(value, str)
                and (key == "server" or value is not None)
            ):
                raise ValueError(f"{key!r} should be text, got {value!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def config_dir() -> Path:
    """Where the CLI keeps this file (`schedulearn.settings.config_dir`'s answer,
    without importing the server's settings: pydantic-settings is slow to load)."""
    return Path(platformdirs.user_config_dir("schedulearn"))


def config_path() -> Path:
    override = os.environ.get("SCHEDULEARN_CONFIG")
    return Path(override) if override else config_dir() / "cli.json"


def load_file(path: Path | None = None) -> CliConfig:
    path = path or config_path()
    try:
        return CliConfig.from_json(path.read_text())
    except FileNotFoundError:
        return CliConfig()
    except ValueError as exc:
        raise SystemExit(f"{path} is not a valid CLI config ({exc}); fix or delete it") from None


def save(config: CliConfig, path: Path | None = None) -> Path:
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    # It holds tokens: created 0600, so it is never readable by others, not even briefly.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(dataclasses.asdict(config), indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def resolve(server: str | list[str] | None = None, token: str | None = None) -> CliConfig:
    """The settings in force: flags over environment over the file."""
    base = load_file()
    given = server or os.environ.get("SCHEDULEARN_SERVER") or base.server
    try:
        servers = ",".join(parse_servers(given))
    except ServerListError as exc:
        raise SystemExit(f"error: {exc}") from None
    return CliConfig(
        server=servers,
        token=token or os.environ.get("SCHEDULEARN_TOKEN") or base.token,
        agent_token=base.agent_token,
    )
