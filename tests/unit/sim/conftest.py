"""Shared fixtures of the simulator tests: where the public traces are."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture
def traces() -> Path:
    """`../shared/traces`, or skip: those tests read the real public trace files."""
    if not (TRACES / "README.md").is_file():
        pytest.skip(f"public traces not found at {TRACES} (they live in ../shared/traces)")
    return TRACES
