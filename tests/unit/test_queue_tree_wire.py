"""Queue trees on the wire (protocol 4): a CLI of this release asks a protocol 3
server for a queue with no parent as before, and is refused before sending one
with a parent (that server would store a root queue silently); `QueueList.tree`
orders a listing as `queue list` and the Queues page show it."""

from __future__ import annotations

import pytest

from schedulearn.protocol import PROTOCOL_VERSION, QueueList, QueuePublic
from schedulearn.protocol_calls import NotKnown, Peer

SERVER_3 = Peer(1, 3, PROTOCOL_VERSION, "CLI")


def test_a_protocol_3_server_gets_no_parent_and_a_parent_is_refused() -> None:
    flat = {"name": "team-a", "guaranteed": {"": 2}}
    assert SERVER_3.outgoing("POST", "/api/v1/queues", None, flat).body == flat
    with pytest.raises(NotKnown, match=r"does not know the field QueueCreate\.parent"):
        SERVER_3.outgoing("POST", "/api/v1/queues", None, {**flat, "parent": "research"})
    with pytest.raises(NotKnown, match=r"QueueUpdate\.clear_parent"):
        SERVER_3.outgoing("PATCH", "/api/v1/queues/team-a", None, {"clear_parent": True})


def _q(name: str, parent: str | None = None, gpus: int = 0, inherited: int = 0) -> QueuePublic:
    return QueuePublic(
        name=name, parent=parent, guaranteed={"": gpus}, guaranteed_gpus=gpus + inherited
    )


def test_a_listing_as_a_tree_puts_each_child_under_its_parent() -> None:
    listing = QueueList(
        items=[
            _q("alpha", gpus=1),
            _q("ml-nlp", "research", 1),
            _q("ml-vision", "research", 2, inherited=1),  # counted as declared: 2
            _q("deep", "ml-vision"),
            _q("research", gpus=4),
            _q("zeta"),
        ]
    )
    assert [(d, q.name) for d, q in listing.tree()] == [
        (0, "alpha"),
        (0, "research"),
        (1, "ml-nlp"),
        (1, "ml-vision"),
        (2, "deep"),
        (0, "zeta"),
    ]
    assert listing.children_promised("research") == 3 and listing.children_promised("zeta") == 0
    research = listing.items[4]
    assert listing.summary_of(research).startswith("research's own jobs use 0 of the 4 GPUs")
    assert listing.summary_of(listing.items[0]) == listing.items[0].summary
