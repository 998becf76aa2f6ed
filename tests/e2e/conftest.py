"""End-to-end fixtures: a real `schedulearn server` process and real
`python -m schedulearn.agent` processes with virtual GPUs, on 127.0.0.1,
spoken to only over HTTP (and through the `schedulearn` CLI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A server and two agents of 4 virtual GPUs each."""
    c = Cluster(tmp_path)
    try:
        c.start()
        c.add_agent("a")
        c.add_agent("b")
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
