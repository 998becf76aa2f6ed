"""The protocol version an agent speaks to its server, and what it leaves out.

`Speaking` holds the server's range once the agent's client has probed it
(`protocol_calls`), keeps the protocol header of the client's transports
at the version spoken, turns a call into what the server's version takes
(an agent's reports are `lossy`: a field the server lacks is left out,
logged once per field), and reads a refusal that names another range
than the one probed (the server was upgraded or downgraded meanwhile).

It owns that range and the set of fields already logged; `agent.client`
does the I/O.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping, Sequence
from typing import Any

from schedulearn.protocol import AGENT_PREFIX, PROTOCOL_HEADER
from schedulearn.protocol_calls import Peer, parse_range

log = logging.getLogger(__name__)


class Speaking:
    """What the agent speaks to the server: its own version until probed."""

    def __init__(self, ours: int, headers: Sequence[MutableMapping[str, str]]) -> None:
        self.ours = ours
        self.peer: Peer | None = None
        self._headers = headers  # each transport's headers, sent with every call
        self._left_out: set[str] = set()

    @property
    def sent(self) -> int:
        """The version the calls carry now."""
        return int(self._headers[0].get(PROTOCOL_HEADER, self.ours))

    def learn(self, oldest: int, newest: int) -> Peer:
        self.peer = Peer(oldest, newest, self.ours, "agent")
        # A server too new for this agent gets the agent's own version: its refusal
        # says to upgrade the agent.
        speak = str(self.peer.speak if self.peer.refusal() is None else self.ours)
        for headers in self._headers:
            headers[PROTOCOL_HEADER] = speak
        if self.peer.speak < self.ours:
            log.warning(
                "the server speaks protocol %s, older than this agent's %s: "
                "speaking %s to it (upgrade the server for what it lacks)",
                self.peer.speaks, self.ours, self.peer.speak,
            )  # fmt: skip
        return self.peer

    def judged(
        self, peer: Peer, method: str, path: str, params: dict[str, str] | None, body: Any
    ) -> tuple[dict[str, str] | None, str | None]:
        """The query and JSON text of a call (`body`: its JSON data) as the server's
        version takes them; `protocol_calls.NotKnown` when it lacks the call."""
        out = peer.outgoing(method, AGENT_PREFIX + path, params, body, lossy=True)
        for what in set(out.left_out) - self._left_out:
            self._left_out.add(what)
            log.warning("not sent to the server of protocol %s: %s", peer.speaks, what)
        content = None if out.body is None else json.dumps(out.body, separators=(",", ":"))
        return out.params, content

    def refused(self, status: int, header: str | None) -> bool | None:
        """Whether a reply refuses the version sent: None when it does not (every
        reply of protocol 3 on carries the range), True when the agent cannot
        speak to the server, False when the server changed since the probe and
        the call should be sent again at its version."""
        speaks = parse_range(header)
        if status != 400 or speaks is None or speaks[0] <= self.sent <= speaks[1]:
            return None
        known = self.peer
        peer = self.learn(*speaks)
        changed = known is None or (known.oldest, known.newest) != speaks
        return not (changed and peer.refusal() is None)
