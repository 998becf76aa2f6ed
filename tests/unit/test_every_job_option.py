"""Every job option has a `schedulearn submit` flag and a web form field (issue 35).

The list is JobSpec's own fields: a field added to the spec without a flag
(`cli.jobs.SPEC_FLAGS`, and the flag among `submit`'s options) or without a
form field (`server.web.forms.FIELDS`) fails here, naming it. Both surfaces
validate with JobSpec, so a bad value gets the same message from each:
checked below through the real command (in a process, refused before any
call) and the form's parser.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from schedulearn.cli import jobs
from schedulearn.protocol import JobSpec
from schedulearn.server.web import forms

# JobSpec fields that are not user options, each with why. None today: every
# field a user may set is one. (A field the server fills itself belongs on
# JobPublic, not JobSpec.)
NOT_OPTIONS: dict[str, str] = {}


def _submit_options() -> set[str]:
    holder = typer.Typer()
    jobs.register(holder)
    command = typer.main.get_group(holder).commands["submit"]
    names = {"COMMAND"}
    for param in command.params:
        names.update(param.opts)
        names.update(getattr(param, "secondary_opts", []))
    return names


def _form_sets() -> set[str]:
    names = set(forms.FIELD_NAMES)
    for sets in forms.SETS.values():
        names.update(sets)
    return names


def test_every_job_spec_field_has_a_cli_flag() -> None:
    options = _submit_options()
    missing = [
        f"{name} (add a `submit` flag and its line in cli.jobs.SPEC_FLAGS)"
        for name in JobSpec.model_fields
        if name not in NOT_OPTIONS and jobs.SPEC_FLAGS.get(name) not in options
    ]
    assert not missing, f"job options without a CLI flag: {missing}"


def test_every_job_spec_field_has_a_web_form_field() -> None:
    sets = _form_sets()
    missing = [
        f"{name} (add it to server.web.forms.FIELDS and submit.html)"
        for name in JobSpec.model_fields
        if name not in NOT_OPTIONS and name not in sets
    ]
    assert not missing, f"job options without a web form field: {missing}"
    # ... and each form field is on the page.
    page = (Path(forms.__file__).parent / "templates" / "submit.html").read_text()
    absent = [
        f for f in forms.FIELD_NAMES if f"field('{f}'" not in page and f'name="{f}"' not in page
    ]
    assert not absent, f"form fields missing from submit.html: {absent}"


def test_the_exclusions_are_real_fields() -> None:
    assert set(NOT_OPTIONS) <= set(JobSpec.model_fields)
    assert set(jobs.SPEC_FLAGS) <= set(JobSpec.model_fields), "a flag for a field JobSpec lacks"


def _cli_refusal(*flags: str) -> str:
    # No server listens on port 9: the spec is refused before any call.
    done = subprocess.run(
        [
            *(sys.executable, "-m", "schedulearn.cli.main", "submit"),
            *("--server", "http://127.0.0.1:9", *flags, "--", "true"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    return " ".join(done.stderr.split())


@pytest.mark.parametrize(
    ("flags", "form", "field", "message"),
    [
        (
            ["--min-gpus", "3", "--max-gpus", "2"],
            {"min_gpus": "3", "max_gpus": "2"},
            "min_gpus",
            "min_gpus (3) is above max_gpus (2)",
        ),
        (["--min-gpus", "2"], {"min_gpus": "2"}, "min_gpus", "give both min_gpus and max_gpus"),
        (["--time", "0"], {"time_limit": "0"}, "time_limit", "time_limit must be more than 0"),
        (
            ["--dependency", "after:3"],
            {"dependency": "after:3"},
            "dependency",
            "'after' is not a dependency kind",
        ),
        (["--array", "9-2"], {"array": "9-2"}, "array", "'9-2': write FIRST-LAST"),
        (["--max-restarts", "101"], {"max_restarts": "101"}, "max_restarts", "less than or equal"),
    ],
)
def test_a_bad_value_gets_the_same_message_from_both(
    flags: list[str], form: dict[str, str], field: str, message: str
) -> None:
    parsed = forms.parse({"command": "true", **form})
    assert parsed.spec is None
    assert message in parsed.errors[field], parsed.errors
    assert message in _cli_refusal(*flags)


def test_the_form_array_field_makes_an_array_with_a_limit() -> None:
    parsed = forms.parse(
        {
            "command": "python train.py",
            "array": "5-9%2",
            "count": "1",
            "time_limit": "1-12:00:00",
            "dependency": " afterok:4:3 ",
            "queue": "vision",
            "constraints": "nvlink, ssd",
            "model": "resnet50",
            "max_restarts": "0",
        }
    )
    assert parsed.spec is not None, parsed.errors
    spec = parsed.spec
    assert (spec.count, spec.array_start, spec.array_limit) == (5, 5, 2)
    assert spec.time_limit_seconds == 36 * 3600
    assert spec.dependency == "afterok:4:3"
    assert (spec.queue, spec.constraints, spec.model) == ("vision", ["nvlink", "ssd"], "resnet50")
    assert spec.max_restarts == 0
    both = forms.parse({"command": "true", "array": "0-3", "count": "4"})
    assert both.errors["array"] == "Give Array or Count, not both"
