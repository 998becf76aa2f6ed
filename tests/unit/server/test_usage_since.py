"""`usage --since`: a span back from now or a UTC date; anything else says what to give."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schedulearn.server.errors import BadRequest
from schedulearn.server.services.queues import settle
from schedulearn.server.services.usage import parse_since

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "back"), [("90m", 5400), ("12h", 43200), ("7d", 604800), ("2w", 1209600)]
)
def test_a_span_counts_back_from_now(text: str, back: float) -> None:
    assert parse_since(text, NOW) == NOW - back


def test_a_date_is_utc() -> None:
    assert parse_since("2026-11-01", NOW) == datetime(2026, 11, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("text", ["yesterday", "7 days", "2027-01-01"])
def test_anything_else_is_refused_with_what_to_give(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_since(text, NOW)
    assert "span" in refused.value.message


def test_usage_decays_by_half_over_a_half_life() -> None:
    assert settle(100.0, 0, 3600.0, 3600.0) == pytest.approx(50.0)
    # Holding 2 GPUs for a short while adds about 2 GPU-seconds per second.
    assert settle(0.0, 2, 10.0, 7 * 86400.0) == pytest.approx(20.0, rel=1e-4)
