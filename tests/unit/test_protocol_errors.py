"""`protocol_errors.explain`: an unknown field's error names the closest valid
field and every valid one, inside nested parts too; other errors pass as they are."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schedulearn.protocol import JobSpec, NodeRegistration
from schedulearn.protocol_errors import explain


def _messages(model: type[JobSpec] | type[NodeRegistration], data: object) -> list[str]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(data)
    return [e["msg"] for e in explain(model, refused.value.errors())]


def test_a_typo_at_the_top_names_the_closest_field() -> None:
    (message,) = _messages(JobSpec, {"command": "x", "gpus_type": "a100"})
    assert message.startswith("unknown field 'gpus_type' (did you mean 'gpu_type'?); valid fields:")
    assert sorted(message.split("valid fields: ")[1].split(", ")) == sorted(JobSpec.model_fields)


def test_a_typo_inside_a_list_of_parts_is_matched_against_that_part() -> None:
    (message,) = _messages(NodeRegistration, {"name": "n1", "gpus": [{"index": 0, "memory": 80}]})
    assert message.startswith("unknown field 'memory' (did you mean 'memory_mb'?)")
    assert "valid fields: index, memory_mb," in message


def test_other_errors_are_unchanged() -> None:
    messages = _messages(JobSpec, {"command": "x", "gpus": -1})
    assert messages == ["Input should be greater than or equal to 0"]
