"""Plain parameters converted without pydantic (`cli.params`) give what
Typer's own converter gives: the same values for well-formed input, Typer's
own messages for the rest, and Typer still converting every other type.
"""

from __future__ import annotations

import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer._coercion import build_runtime_param
from typer.core import TyperArgument, TyperGroup, TyperOption
from typer.testing import CliRunner

from schedulearn.cli import params
from schedulearn.cli.main import LazyGroup


class Colour(StrEnum):
    red = "red"
    blue = "blue"


def _app(group: type[TyperGroup] = LazyGroup) -> typer.Typer:
    """A test app; LazyGroup converts its plain parameters without pydantic,
    TyperGroup is Typer alone."""
    app = typer.Typer(cls=group)

    @app.command("go")
    def go(
        name: Annotated[str, typer.Option()] = "x",
        count: Annotated[int, typer.Option()] = 1,
        ratio: Annotated[float, typer.Option()] = 0.5,
        flag: Annotated[bool, typer.Option("--flag")] = False,
        tags: Annotated[list[str] | None, typer.Option("--tag")] = None,
        nums: Annotated[list[int] | None, typer.Option("--num")] = None,
        bounded: Annotated[int, typer.Option(min=0, max=9)] = 0,
        colour: Annotated[Colour, typer.Option()] = Colour.red,
        where: Annotated[Path | None, typer.Option()] = None,
    ) -> None:
        print(repr((name, count, ratio, flag, tags, nums, bounded, colour, where)))

    @app.command("plain")
    def plain(
        count: Annotated[int, typer.Option()] = 1,
        ratio: Annotated[float, typer.Option()] = 0.5,
        flag: Annotated[bool, typer.Option("--flag")] = False,
        tags: Annotated[list[str] | None, typer.Option("--tag")] = None,
        name: Annotated[str | None, typer.Argument()] = None,
    ) -> None:
        print(repr((count, ratio, flag, tags, name)))

    @app.command("paths")
    def paths(
        where: Annotated[Path | None, typer.Option()] = None,
        many: Annotated[list[Path] | None, typer.Option("--many")] = None,
        colour: Annotated[Colour | None, typer.Option()] = None,
    ) -> None:
        print(repr((where, many, colour)))

    return app


def run(group: type[TyperGroup], *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(_app(group), list(args))
    return done.exit_code, done.output


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--name", "n", "--count", "-12", "--ratio", "2.25", "--flag", "--tag", "a"],
        ["--tag", "a", "--tag", "b", "--num", "3", "--num", "0"],
        ["--bounded", "4", "--colour", "blue", "--where", "/tmp"],
        ["--ratio", "3", "--count", "007", "--name", ""],
        ["--count", "1_000", "--ratio", "1e3"],
        ["--count", "abc"],
        ["--ratio", "fast"],
        ["--num", "1", "--num", "x"],
        ["--bounded", "12"],
        ["--colour", "green"],
        ["--help"],
    ],
)
def test_command_lines_read_as_typer_alone_reads_them(args: list[str]) -> None:
    alone = run(TyperGroup, "go", *args)
    assert run(LazyGroup, "go", *args) == alone
    if "--help" not in args and alone[0] == 0:
        assert alone[1].startswith("(")  # the command ran and printed its values


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--where", "/tmp", "--many", "a", "--many", "b/c", "--colour", "blue"],
        ["--colour", "green"],
    ],
)
def test_options_left_out_read_as_typer_alone_reads_them(args: list[str]) -> None:
    # Paths, lists of paths and enums left out read as None without Typer's
    # converter; given, they go through it.
    alone = run(TyperGroup, "paths", *args)
    assert run(LazyGroup, "paths", *args) == alone
    if not args:
        assert alone == (0, "(None, None, None)\n")


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (int, "0"),
        (int, "-7"),
        (int, "123456789012345678"),
        (int, 5),
        (float, "1.5"),
        (float, "-0.25"),
        (float, "3"),
        (float, 2),
        (float, 2.5),
        (str, "text with spaces"),
        (str, ""),
        (bool, True),
    ],
)
def test_the_plain_converter_returns_what_typers_adapter_returns(kind: type, value: Any) -> None:
    app = typer.Typer()

    def one(x: int) -> None:
        pass

    one.__annotations__["x"] = Annotated[kind, typer.Option()]  # the type of this case
    app.command()(one)
    command = typer.main.get_command(app)
    (option,) = [p for p in command.params if p.name == "x"]
    assert isinstance(option, TyperOption)
    ctx = typer.Context(command)
    want = build_runtime_param(option.type_descriptor).coerce(value, param=option, ctx=ctx)
    assert params.plain_kind(option) == (kind, False)
    got = params.PlainValue(kind, many=False).convert(value)
    assert got == want and type(got) is type(want)


def test_spellings_left_to_typer() -> None:
    # Converted by pydantic, or refused there: never guessed here.
    plain = params.PlainValue(int, many=False)
    for value in ("1_000", " 5", "+5", "1e3", "1.0", "007", True):
        assert plain.convert(value) is params._MISSING, value
    assert params.PlainValue(float, many=False).convert("inf") is params._MISSING
    assert params.PlainValue(bool, many=False).convert("yes") is params._MISSING


def test_only_plain_parameters_are_installed() -> None:
    group = typer.main.get_group(_app())
    command = group.commands["go"]
    ctx = typer.Context(command)
    params.install_tree(command, ctx)
    every = command.get_params(ctx)
    typers = [p for p in every if isinstance(p, TyperOption | TyperArgument)]
    assert len(typers) == len(every)
    installed = {p.name: type(p._runtime_param).__name__ for p in typers}
    assert installed == {
        "name": "PlainValue",
        "count": "PlainValue",
        "ratio": "PlainValue",
        "flag": "PlainValue",
        "tags": "PlainValue",
        "nums": "PlainValue",
        "help": "PlainValue",
        # Bounds, enums and paths keep Typer's converter, built when a value comes.
        "bounded": "TyperLater",
        "colour": "TyperLater",
        "where": "TyperLater",
    }


PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from test_params import _app
from typer.core import TyperGroup
from typer.testing import CliRunner
done = CliRunner().invoke(_app(), sys.argv[2:])
assert done.exit_code == 0, done.output
print('pydantic' in sys.modules)
"""


@pytest.mark.parametrize(
    ("args", "pydantic"),
    [
        (["plain", "--count", "3", "--tag", "a", "--flag", "--ratio", "1.5", "n"], False),
        (["plain"], False),
        (["go", "--help"], False),
        # Paths and enums left out cost nothing (simulate's --json, --plot, --apps).
        (["paths"], False),
        # The check can fail: enums, bounded numbers and paths given (or an
        # enum's default) still go through Typer's pydantic adapter.
        (["paths", "--where", "/tmp"], True),
        (["go"], True),
    ],
)
def test_plain_command_lines_load_no_pydantic(args: list[str], pydantic: bool) -> None:
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, here, *args], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(pydantic), done.stderr
