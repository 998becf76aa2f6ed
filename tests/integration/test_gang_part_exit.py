"""A gang part's GPUs are free for the next pass once that part has exited.

A gang frees each node's GPUs as its part there exits, while the job runs
on until its last part ends. The nodes the policy sees show those GPUs
free; the ledger that checks the pass held the job's whole placement and
refused the start the policy made there (`bench/scale.py`: "policy pass
refused by the ledger", a few a minute at 300 nodes, each such pass then
checked decision by decision, the start skipped). Real app and database,
both backends; the scheduler runs when the test calls `schedule()`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stepped import Stepped, stepped_app
from wire_agent import WireAgent

from schedulearn.settings import ServerSettings


@pytest.fixture
def app(settings: ServerSettings) -> Iterator[Stepped]:
    with stepped_app(settings) as stepped:
        yield stepped


def test_a_job_starts_on_the_gpus_of_a_gang_part_that_ended(app: Stepped) -> None:
    n1, n2 = WireAgent(app.api, "n1", gpus=2), WireAgent(app.api, "n2", gpus=2)
    n1.register()
    n2.register()
    gang = app.submit(gpus=4)
    app.schedule()
    (on1,), (on2,) = n1.work(wait=0).starts, n2.work(wait=0).starts
    assert on1.job_id == on2.job_id == gang
    n1.start(gang, on1.attempt)
    n2.start(gang, on2.attempt)
    n1.exit(gang, on1.attempt, 0)  # n1's part is done; n2's runs on
    assert app.job(gang).state == "running"

    waiting = app.submit(gpus=2)
    round_ = app.schedule()
    assert round_.result is not None
    assert round_.result.skipped == []
    assert round_.result.started == [waiting]
    (start,) = n1.work(wait=0).starts
    assert start.job_id == waiting
