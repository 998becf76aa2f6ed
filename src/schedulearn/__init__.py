"""Schedulearn: schedule deep-learning training jobs on GPU servers.

The version is written once, in pyproject.toml; `schedulearn.__version__`
reads it from the installed package's metadata. It is looked up on first
use, not at import, so `import schedulearn.runtime` in a training script
stays as cheap as the standard library makes it.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("schedulearn")
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            return "0+unknown"
    raise AttributeError(f"module 'schedulearn' has no attribute {name!r}")
