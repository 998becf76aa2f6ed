"""The garbage collector is off while a pass decides and back as it was after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from schedulearn.collector import collector_held


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.enable()
    yield
    if not was_on:
        gc.disable()


def test_the_collector_is_off_in_the_hold_and_on_again_after(collector_on: None) -> None:
    with collector_held():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_in_the_hold_turns_the_collector_back_on(collector_on: None) -> None:
    with pytest.raises(RuntimeError), collector_held():
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_host_stays_off(collector_on: None) -> None:
    gc.disable()
    with collector_held():
        pass
    assert not gc.isenabled()
    gc.enable()
