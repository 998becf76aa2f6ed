"""An earlier commit's `src` folder, taken from this clone's git history.

For tests that run an earlier release's code beside this checkout's (its
database, its clients). A clone without the commit (a shallow CI clone)
fetches it from its remotes; when that fails the test fails, saying what
to run: a check of an upgrade that silently did not run is worse than none.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=timeout
    )


def _have(commit: str) -> bool:
    return _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def _fetch(commit: str) -> list[str]:
    """Try to fetch `commit` from each remote; what each attempt said."""
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    tried = []
    for remote in _git("remote").stdout.split():
        depth = ["--depth=1"] if shallow else []  # a full clone stays full
        done = _git("fetch", "--quiet", "--no-tags", *depth, remote, commit, timeout=300)
        tried.append(f"git fetch {remote} {commit}: exit {done.returncode} {done.stderr[:300]}")
        if _have(commit):
            break
    return tried


def source_at(commit: str, into: Path, what: str = "") -> Path:
    """`src` of `commit` (`what` it is, for messages), unpacked under `into`;
    the path of that `src`."""
    named = f"{commit} ({what})" if what else commit
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.fail(f"{REPO} is not a git checkout, so commit {named} cannot be taken from it")
    if not _have(commit):
        tried = _fetch(commit)
        if not _have(commit):
            pytest.fail(
                f"this clone lacks commit {named} and could not fetch it "
                f"({'; '.join(tried) or 'no git remote'}): run `git fetch origin {commit}` "
                "(or `git fetch --unshallow`), then the test again"
            )
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"
