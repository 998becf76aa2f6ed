"""`cli.invocation.command`: the command line `up` and the CLI's errors name for
this install (issue 35), read from real files and a given environment: under
`uv run`, `uv run schedulearn` (with `--project` away from the clone); on
PATH, the bare name; elsewhere the script's full path."""

from __future__ import annotations

from pathlib import Path

from schedulearn.cli.invocation import activation, command


def _install(root: Path) -> Path:
    """A virtual environment's bin directory with a python and a schedulearn script."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "schedulearn"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_under_uv_run_it_is_uv_run_from_the_project_or_with_project(tmp_path: Path) -> None:
    bin_dir = _install(tmp_path)
    env = {
        "UV_RUN_RECURSION_DEPTH": "1",
        "VIRTUAL_ENV": str(tmp_path / ".venv"),
        "PATH": f"{bin_dir}:/usr/bin",  # uv puts it first for `up` alone, not the user's shell
    }
    python = str(bin_dir / "python")
    assert command(env, python, tmp_path) == "uv run schedulearn"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert command(env, python, elsewhere) == f"uv run --project {tmp_path} schedulearn"
    assert activation(env) == f"source {tmp_path}/.venv/bin/activate"


def test_on_path_it_is_the_bare_name_and_off_path_the_full_path(tmp_path: Path) -> None:
    bin_dir = _install(tmp_path)
    python = str(bin_dir / "python")
    assert command({"PATH": f"/usr/bin:{bin_dir}"}, python, tmp_path) == "schedulearn"
    assert command({"PATH": "/usr/bin"}, python, tmp_path) == str(bin_dir / "schedulearn")
    assert activation({"PATH": "/usr/bin"}) is None
    # Another install's `schedulearn` first on PATH is not this one.
    other = _install(tmp_path / "other")
    path = f"{other}:{bin_dir}"
    assert command({"PATH": path}, python, tmp_path) == str(bin_dir / "schedulearn")


def test_with_no_script_it_is_the_module(tmp_path: Path) -> None:
    bin_dir = _install(tmp_path)
    (bin_dir / "schedulearn").unlink()
    python = str(bin_dir / "python")
    assert command({"PATH": str(bin_dir)}, python, tmp_path) == f"{python} -m schedulearn.cli.main"
