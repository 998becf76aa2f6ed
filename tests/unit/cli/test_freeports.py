"""`free_port()`: never the same port twice while held, never one in use, never ephemeral."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from schedulearn.cli import freeports


def _ephemeral() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


@pytest.fixture
def three_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> range:
    """A ledger of this test's own over three ports that nothing listens on."""
    for start in range(15000, 19990, 7):
        ports = range(start, start + 3)
        if all(freeports._bindable(p) for p in ports):
            break
    monkeypatch.setattr(freeports, "PORTS", ports)
    monkeypatch.setattr(freeports, "LEDGER", tmp_path / "ports")
    return ports


def test_each_caller_gets_a_port_no_other_caller_holds(three_ports: range) -> None:
    given = [freeports.free_port() for _ in three_ports]
    assert sorted(given) == list(three_ports)
    with pytest.raises(RuntimeError, match=r"no free port in .* remove .*ports"):
        freeports.free_port()


def test_other_processes_see_the_ports_handed_out(three_ports: range) -> None:
    """The ledger is shared: a port given here is not given to another process."""
    mine = freeports.free_port()
    script = (
        "import sys, pathlib; from schedulearn.cli import freeports; "
        f"freeports.PORTS = range({three_ports.start}, {three_ports.stop}); "
        f"freeports.LEDGER = pathlib.Path({str(freeports.LEDGER)!r}); "
        "print(freeports.free_port(), freeports.free_port())"
    )
    theirs = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted([mine, *map(int, theirs)]) == list(three_ports)


def test_a_port_something_listens_on_is_never_given(three_ports: range) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", three_ports[1]))
        taken.listen()
        given = {freeports.free_port(), freeports.free_port()}
        with pytest.raises(RuntimeError):
            freeports.free_port()
    assert given == {three_ports[0], three_ports[2]}


def test_ports_lie_below_the_ephemeral_range_outgoing_connections_use() -> None:
    assert freeports.free_port() < _ephemeral().start
    assert freeports.PORTS.stop <= _ephemeral().start
