"""Several server addresses and which one to use next (issue 14, item 8).

Replicas of the server share one PostgreSQL database, so any of them can
take any request. The agent and the CLI are given their addresses as a
list (`--server http://a:8642,http://b:8642`, repeated `--server`, or a
list in a config file); `parse_servers` turns what the user wrote into a
clean tuple or says what to change.

`Rotation` is the choice of address, shared by the agent's and the CLI's
clients: it sticks to the address that last worked; a failure moves it to
the next one, and once every address has failed since the last success
(`failed` returns True) the caller backs off before going round again, so
a whole outage is paced by one backoff, not one per address.

Standard library only: the CLI imports it on every start.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

# Sent with every request when there are other replicas to try: a replica still
# loading its app answers 503 after this long instead of holding the request
# until it is ready (`server.startup`, RFC 7240's `wait` preference).
PREFER_HEADER = ("Prefer", "wait=2")


class ServerListError(ValueError):
    """The server addresses given cannot be used (the message says what to change)."""


def parse_servers(value: str | Iterable[str]) -> tuple[str, ...]:
    """Addresses from a comma-separated string or several strings (each may hold
    commas), trailing slashes dropped, repeats removed, order kept."""
    items = [value] if isinstance(value, str) else list(value)
    seen: dict[str, None] = {}
    for item in items:
        for part in item.replace(" ", ",").split(","):
            url = part.strip().rstrip("/")
            if not url:
                continue
            parts = urlsplit(url)
            try:
                parts.port  # noqa: B018  # raises on a port that is not a number
            except ValueError:
                raise ServerListError(
                    f"server address {url!r} has a bad port; write it like http://host:8642"
                ) from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ServerListError(
                    f"server address {url!r} must look like http://host:8642 "
                    "(several: separate them with commas)"
                )
            seen.setdefault(url, None)
    if not seen:
        raise ServerListError("no server address given; pass --server http://host:8642")
    return tuple(seen)


class Rotation:
    """The address in use, and how many have failed in a row since the last success."""

    def __init__(self, addresses: Iterable[str]) -> None:
        self.addresses = tuple(addresses)
        if not self.addresses:
            raise ServerListError("no server address given; pass --server http://host:8642")
        self._index = 0
        self._failures = 0  # consecutive, since the last success

    @property
    def current(self) -> str:
        return self.addresses[self._index]

    def describe(self) -> str:
        """The addresses for a message: one, or the list."""
        return ", ".join(self.addresses)

    def succeeded(self) -> None:
        """The current address answered: stay on it."""
        self._failures = 0

    def failed(self, address: str | None = None) -> bool:
        """The current address (or `address`, the one a request used) failed: move
        on to the next one. True when every address has now failed in a row since
        the last success (time to back off); the count then starts again, so the
        next round tries each address once more. A failure of an address that is
        no longer the current one (another request already moved on) changes
        nothing and returns False: the caller tries the current one."""
        if address is not None and address != self.current:
            return False
        self._failures += 1
        self._index = (self._index + 1) % len(self.addresses)
        if self._failures >= len(self.addresses):
            self._failures = 0
            return True
        return False
