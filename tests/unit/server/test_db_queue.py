"""`DbQueue`: `first` work before queued requests, each class in the order it came;
a cancelled call never runs; shutdown runs what is queued, then takes nothing."""

from __future__ import annotations

import threading

import pytest

from schedulearn.server.db_queue import DbQueue

PATIENCE = 30.0


def held(queue: DbQueue) -> threading.Event:
    """Hold the queue's one thread until the returned event is set."""
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(PATIENCE)

    queue.submit(hold)
    assert started.wait(PATIENCE)
    return gate


def test_first_work_goes_ahead_of_queued_requests_and_each_class_keeps_its_order() -> None:
    queue = DbQueue(1)
    order: list[str] = []
    gate = held(queue)
    futures = [
        queue.submit(order.append, "request 1"),
        queue.submit(order.append, "request 2"),
        queue.submit_first(order.append, "pass 1"),
        queue.submit(order.append, "request 3"),
        queue.submit_first(order.append, "pass 2"),
    ]
    assert queue.waiting() == (2, 3)
    gate.set()
    for future in futures:
        future.result(PATIENCE)
    queue.shutdown()
    assert order == ["pass 1", "pass 2", "request 1", "request 2", "request 3"]


def test_a_call_cancelled_while_queued_never_runs_and_errors_reach_the_caller() -> None:
    queue = DbQueue(1)
    ran: list[str] = []
    gate = held(queue)
    cancelled = queue.submit(ran.append, "cancelled")
    failing = queue.submit_first(int, "not a number")
    kept = queue.submit(ran.append, "kept")
    assert cancelled.cancel()
    gate.set()
    kept.result(PATIENCE)
    with pytest.raises(ValueError, match="not a number"):
        failing.result(PATIENCE)
    queue.shutdown()
    assert ran == ["kept"]


def test_shutdown_runs_what_is_queued_then_refuses_new_work() -> None:
    queue = DbQueue(2)
    assert queue.threads == 2
    ran: list[int] = []
    futures = [queue.submit(ran.append, i) for i in range(5)]
    queue.shutdown(wait=True)
    assert all(f.done() for f in futures) and sorted(ran) == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit(ran.append, 9)
    with pytest.raises(ValueError, match="at least one thread"):
        DbQueue(0)
