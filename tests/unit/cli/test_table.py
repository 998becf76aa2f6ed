"""`cli.table`: what is kept, cut and dropped to fit a width; nothing cut when piped."""

from __future__ import annotations

import pytest

from schedulearn.cli.table import Column, FormatError, parse_format, render

ROWS = [(7, "running", "a-very-long-name", "python train.py --epochs 100 --lr 0.1")]
COLUMNS: list[Column[tuple[int, str, str, str]]] = [
    Column("id", "ID", lambda r: str(r[0]), keep=True),
    Column("name", "NAME", lambda r: r[2], drop=2),
    Column("state", "STATE", lambda r: r[1], keep=True),
    Column("command", "COMMAND", lambda r: r[3], shrink=True, min_width=10, drop=1),
]


def test_piped_output_is_never_cut() -> None:
    text = render(ROWS, COLUMNS, None)
    assert ROWS[0][3] in text and ROWS[0][2] in text


@pytest.mark.parametrize("width", [80, 50, 40, 30, 20, 10])
def test_id_and_state_stay_whole_at_any_width(width: int) -> None:
    lines = render(ROWS, COLUMNS, width).splitlines()
    assert lines[1].split()[0] == "7" and "running" in lines[1].split()
    if width >= 30:
        assert max(map(len, lines)) <= width


def test_the_command_is_shortened_before_a_column_is_dropped() -> None:
    full = len(render(ROWS, COLUMNS, None).splitlines()[1])
    lines = render(ROWS, COLUMNS, full - 5).splitlines()
    assert "a-very-long-name" in lines[1] and lines[1].endswith("…")
    narrow = render(ROWS, COLUMNS, 30).splitlines()
    assert narrow[0].split() == ["ID", "STATE", "COMMAND"]


def test_format_picks_columns_in_order_and_names_the_choices() -> None:
    assert [c.key for c in parse_format("State, ID", COLUMNS)] == ["state", "id"]
    with pytest.raises(FormatError, match="choose from id, name, state, command"):
        parse_format("id,owner", COLUMNS)
