"""The code and the revisions `scripts/new-field` writes are checked in and current.

A field declared in core/views.py without running `scripts/new-field`
fails here (in `scripts/test --fast` too), naming the file or the column.
"""

from __future__ import annotations

import dataclasses

import pytest

from schedulearn.core.capabilities import NodeCapabilities
from schedulearn.core.views import Role
from schedulearn.server import fieldcode, fieldmigration
from schedulearn.server.declared import STORED


def test_the_blocks_of_declared_fields_are_current() -> None:
    stale = fieldcode.stale()
    assert stale == [], f"stale blocks of declared fields in {stale}: run scripts/new-field"


def test_every_column_of_the_models_has_its_revision() -> None:
    missing = [fieldmigration.describe(c) for c in fieldmigration.pending()]
    assert missing == [], f"no revision makes {missing}: run scripts/new-field"


@dataclasses.dataclass(frozen=True)
class _View:
    count: int = dataclasses.field(default=0, metadata={"role": Role.SUBMITTED})
    ratio: float | None = dataclasses.field(default=None, metadata={"role": Role.KEPT})
    tags: tuple[str, ...] = dataclasses.field(default=("a",), metadata={"role": Role.INTERNAL})
    caps: NodeCapabilities = dataclasses.field(
        default_factory=NodeCapabilities, metadata={"role": Role.SUBMITTED}
    )


_SOURCE = """\
from typing import Any


class Row(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    count: int = 7

    # Declared on core.views._View: written by scripts/new-field, do not edit.
    stale: str = column(_View, "stale")
    # End of the declared fields.


class Wire(BaseModel):
    count: int = 0

    # Declared on core.views._View: written by scripts/new-field, do not edit.
    # End of the declared fields.
"""


def test_a_table_block_gets_every_stored_field_the_class_does_not_spell_out() -> None:
    target = fieldcode.Target("m.py", "Row", _View, STORED, table=True)
    block = fieldcode.render(_SOURCE, target).split("class Wire")[0]
    assert block.splitlines()[-6:-2] == [
        '    ratio: float | None = column(_View, "ratio")',
        '    tags: Any = column(_View, "tags")',
        '    caps: Any = column(_View, "caps")',
        "    # End of the declared fields.",
    ]
    assert "stale" not in block and "count: int = column" not in block


def test_a_wire_block_names_a_type_the_module_must_import() -> None:
    target = fieldcode.Target("m.py", "Wire", _View, (Role.SUBMITTED,), table=False)
    with pytest.raises(fieldcode.FieldCodeError, match=r"m\.py does not import NodeCapabilities"):
        fieldcode.render(_SOURCE, target)
    imported = "from schedulearn.core.capabilities import NodeCapabilities\n" + _SOURCE
    # Imported, its default (an object, not a literal) still cannot be written.
    with pytest.raises(fieldcode.FieldCodeError, match="spell the field out there"):
        fieldcode.render(imported, target)


def test_a_class_without_its_block_is_refused_with_the_lines_to_add() -> None:
    target = fieldcode.Target("m.py", "Row", _View, STORED, table=True)
    without = _SOURCE.replace("    # End of the declared fields.\n", "", 1)
    with pytest.raises(fieldcode.FieldCodeError, match="end the class body with the two lines"):
        fieldcode.render(without, target)


def test_a_revision_is_numbered_after_the_head_and_fits_alembics_column() -> None:
    assert fieldmigration.next_revision_id("Job project", "0013_declared_columns") == (
        "0014_job_project"
    )
    long = fieldmigration.next_revision_id("a very long description " * 3, "0099_x")
    assert long.startswith("0100_a_very_long") and len(long) <= 32
