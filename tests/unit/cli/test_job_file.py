"""`schedulearn submit -f FILE` with a field the job spec does not have: the
CLI refuses it before sending, naming the closest valid field and listing them
all (issue 35), as the real command run in a process does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schedulearn.protocol import JobSpec


def _submit(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    # No server listens on this port: the spec must be refused before any call.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "schedulearn.cli.main",
            "submit",
            "-f",
            str(job),
            "--server",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_misspelt_field_names_the_closest_and_every_valid_one(tmp_path: Path) -> None:
    done = _submit(tmp_path, "command: python train.py\ngpu: 2\n")
    assert done.returncode == 2, done.stderr
    assert "gpu: unknown field 'gpu' (did you mean 'gpus'?)" in done.stderr
    listed = done.stderr.split("valid fields: ", 1)[1].split()
    assert {f.strip(",") for f in listed} >= set(JobSpec.model_fields)
    assert "Extra inputs are not permitted" not in done.stderr


def test_a_field_like_none_still_lists_the_valid_ones(tmp_path: Path) -> None:
    done = _submit(tmp_path, "command: python train.py\nzzz: 1\n")
    assert done.returncode == 2, done.stderr
    assert "unknown field 'zzz'; valid fields: array_limit," in done.stderr
    assert "did you mean" not in done.stderr
