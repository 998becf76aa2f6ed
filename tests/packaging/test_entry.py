"""The console script's front (`cli.entry`) agrees with pyproject.toml's extras.

Its map from extras to import names is written by hand (it must run with
only the standard library, when those packages are missing): these tests
fail when it names an extra pyproject.toml lacks, a module no distribution
of that extra provides, or when a command asks for the wrong extra.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from schedulearn.cli.entry import (
    COMMAND_EXTRAS,
    EXTRA_MODULES,
    command_of,
    extra_of_module,
    extras_needed,
    install_hint,
    missing_modules,
)

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared_extras() -> dict[str, list[str]]:
    """Each extra's own requirement names (normalised), from pyproject.toml."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return {
        extra: [re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in reqs]
        for extra, reqs in extras.items()
    }


def test_every_extra_the_front_names_is_declared() -> None:
    declared = declared_extras()
    assert set(EXTRA_MODULES) <= set(declared)
    for extras in COMMAND_EXTRAS.values():
        assert set(extras) <= set(declared)


def test_each_module_comes_from_a_distribution_its_extra_requires() -> None:
    declared = declared_extras()
    providers = packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(module, [])}
            assert dists & set(declared[extra]), f"{module} ({dists}) is not in [{extra}]"


def test_the_development_environment_has_every_extra() -> None:
    # uv sync installs schedulearn[all]; a misspelt import name shows here too.
    assert missing_modules(list(EXTRA_MODULES)) == []


def test_each_command_asks_for_its_role() -> None:
    assert extras_needed(["server", "--port", "8000"]) == ("server",)
    assert extras_needed(["up"]) == ("server", "agent")
    assert extras_needed(["agent", "--server", "http://x"]) == ("agent",)
    assert extras_needed(["simulate", "--workload", "tetris"]) == ("sim",)
    assert extras_needed(["simulate", "--plot", "out"]) == ("plots",)
    assert extras_needed(["simulate", "--plot=out"]) == ("plots",)
    assert extras_needed(["submit", "--gpus", "1", "--", "python", "--plot"]) == ("cli",)
    assert extras_needed([]) == ("cli",)
    assert extras_needed(["--help"]) == ("cli",)


def test_the_command_is_the_first_word_before_any_double_dash() -> None:
    assert command_of(["--help"]) is None
    assert command_of(["jobs", "--json"]) == "jobs"
    assert command_of(["--", "server"]) is None


def test_the_hint_names_command_extra_and_install_line() -> None:
    hint = install_hint("server", ("server",), ["fastapi", "uvicorn"])
    assert "`schedulearn server` needs the server extra" in hint
    assert "missing: fastapi, uvicorn" in hint
    assert "pip install 'schedulearn[server]'" in hint
    both = install_hint("up", ("server", "agent"), ["docker"])
    assert "the server and agent extras" in both
    assert "pip install 'schedulearn[server,agent]'" in both


def test_a_module_found_missing_late_maps_to_its_extra() -> None:
    assert extra_of_module("matplotlib.pyplot") == "plots"
    assert extra_of_module("docker.errors") == "agent"
    assert extra_of_module("sqlalchemy") == "server"
    assert extra_of_module("not_a_module_of_ours") is None
