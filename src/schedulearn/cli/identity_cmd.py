"""`schedulearn user ...` and `schedulearn token ...`: users as records, tokens that end;
`user passwd` and `web-login`: signing in to the web without a token.

Thin over `cli.client.Client`, like `cli.jobs`: parse flags, make one
call, print a Rich table (or JSON with `--json`). `user` commands are for
admins; `token create` too, while `token list` and `token revoke` also
serve a user for their own tokens. A token's secret is printed once, by
`token create`, to standard output only (so `> file` keeps it out of the
terminal's scroll-back); `token list` never has it. A password is read
from the terminal without echo (twice), or from standard input with
`--stdin`, never from the command line (where `ps` would show it).
"""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer
from rich.table import Table

from schedulearn.cli.common import error
from schedulearn.cli.jobs import JsonOpt, ServerOpt, TokenOpt, _dump, connect, err, out
from schedulearn.protocol import TokenInfo, UserCreate, UserPublic, UserUpdate


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _user_table(items: list[UserPublic]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("user", "unix account", "root", "priority", "state", "created"):
        table.add_column(column)
    for u in items:
        priority = f"{u.priority_min}..{u.priority_max}" + (" (own)" if u.priority_max_own else "")
        table.add_row(
            u.name,
            u.unix_account,
            "allowed" if u.allow_root else "no",
            priority,
            f"disabled {_when(u.disabled_at)}" if u.disabled_at else "active",
            _when(u.created_at),
        )
    return table


def _token_table(items: list[TokenInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("id", "user", "role", "name", "state", "created", "expires", "last used"):
        table.add_column(column)
    for t in items:
        table.add_row(
            str(t.id),
            t.user,
            t.role,
            t.name or "-",
            t.state.value,
            _when(t.created_at),
            _when(t.expires_at) if t.expires_at else "never",
            _when(t.last_used_at),
        )
    return table


def _show_user(user: UserPublic, as_json: bool, what: str) -> None:
    if as_json:
        _dump(user)
        return
    out.print(f"{what} user [bold]{user.name}[/bold]", highlight=False)
    out.print(_user_table([user]))


# --- user ------------------------------------------------------------------------

NameArg = Annotated[str, typer.Argument(help="The user's name (as in their tokens and jobs)")]
AccountOpt = Annotated[
    str | None,
    typer.Option(
        "--unix-account", help="The unix account their jobs run as on the GPU hosts [their name]"
    ),
]
PriorityMaxOpt = Annotated[
    int | None,
    typer.Option(
        "--priority-max", help="Highest priority they may give a job [the server's setting]"
    ),
]


def user_add(
    name: NameArg,
    unix_account: AccountOpt = None,
    allow_root: Annotated[
        bool, typer.Option("--allow-root", help="Allow their jobs to run as root")
    ] = False,
    priority_max: PriorityMaxOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a user (admin). Then: schedulearn token create --user NAME."""
    body = UserCreate(
        name=name, unix_account=unix_account, allow_root=allow_root, priority_max=priority_max
    )
    with connect(server, token) as client:
        _show_user(client.add_user(body), as_json, "added")


def user_set(
    name: NameArg,
    unix_account: AccountOpt = None,
    allow_root: Annotated[
        bool | None,
        typer.Option("--allow-root/--no-allow-root", help="Allow their jobs to run as root"),
    ] = None,
    priority_max: PriorityMaxOpt = None,
    server_priority: Annotated[
        bool, typer.Option("--server-priority", help="Go back to the server's priority range")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a user's unix account, root permission or priority limit (admin)."""
    body = UserUpdate(
        unix_account=unix_account,
        allow_root=allow_root,
        priority_max=priority_max,
        clear_priority_max=server_priority,
    )
    with connect(server, token) as client:
        _show_user(client.update_user(name, body), as_json, "changed")


def user_disable(
    name: NameArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Disable a user (admin): their tokens and web sessions stop working at once."""
    with connect(server, token) as client:
        _show_user(client.update_user(name, UserUpdate(disabled=True)), as_json, "disabled")


def user_enable(
    name: NameArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Enable a disabled user again (admin): their tokens that are not revoked work again."""
    with connect(server, token) as client:
        _show_user(client.update_user(name, UserUpdate(disabled=False)), as_json, "enabled")


def user_list(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Users, with their unix account, root permission, priority range and state (admin)."""
    with connect(server, token) as client:
        listing = client.users()
    if as_json:
        _dump(listing)
        return
    if not listing.items:
        err.print("no users yet; add one with `schedulearn user add NAME`")
        return
    out.print(_user_table(listing.items))


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    else:
        raise typer.BadParameter(
            "no terminal to ask on; pass --stdin and give the password on standard input"
        )
    from pydantic import ValidationError

    from schedulearn.protocol import PasswordSet

    try:
        PasswordSet(password=password)
    except ValidationError as exc:
        error(str(exc.errors()[0]["msg"]).removeprefix("Value error, "))
        raise typer.Exit(2) from None
    return password


def user_passwd(
    name: Annotated[
        str | None, typer.Argument(help="Whose password: yours, or anyone's as admin [you]")
    ] = None,
    from_stdin: Annotated[
        bool, typer.Option("--stdin", help="Read the password from standard input (one line)")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a password for signing in to the web pages (yours, or anyone's as admin).

    Your own password signs in with the role of the token you set it with; one
    an admin sets for someone else signs in as a user."""
    password = _read_password(from_stdin)
    with connect(server, token) as client:
        who = name or client.whoami().user
        done = client.set_password(who, password)
    if as_json:
        _dump(done)
        return
    out.print(
        f"password set for {done.user}: the web pages sign them in as {done.role}",
        highlight=False,
    )


def web_login(
    open_browser: Annotated[
        bool, typer.Option("--open", help="Also open the link in this machine's browser")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a one-time link that signs a browser in to the web pages as you.

    It works once, for a few minutes; anyone who opens it first is you, so
    keep it to yourself."""
    with connect(server, token) as client:
        link = client.web_login()
        url = client.address.rstrip("/") + link.path
    if as_json:
        _dump({**link.model_dump(mode="json"), "url": url})
        return
    minutes = max(1, round((link.expires_at - time.time()) / 60))
    err.print(
        f"signs a browser in as {link.user} ({link.role}); works once, within {minutes} "
        f"minutes (until {time.strftime('%H:%M', time.localtime(link.expires_at))}):",
        highlight=False,
    )
    out.print(url, highlight=False, soft_wrap=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)


# --- token -----------------------------------------------------------------------


def token_create(
    user: Annotated[str | None, typer.Option("--user", help="Who the token is for [you]")] = None,
    role: Annotated[str, typer.Option("--role", help="user|admin|agent")] = "user",
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            help="When it stops working: 90m, 12h, 30d, 8w, or a UTC date 2027-01-31 [never]",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A label to tell tokens apart")] = "",
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a token (admin). Its secret is printed once, on standard output."""
    if role not in ("user", "admin", "agent"):
        raise typer.BadParameter(f"--role {role!r}: give user, admin or agent")
    with connect(server, token) as client:
        made = client.create_token(user, role, name, expires)
    if as_json:
        _dump(made)
        return
    until = f", expires {_when(made.expires_at)}" if made.expires_at else ""
    err.print(
        f"token {made.id} for {made.user} ({made.role}{until}); shown once, keep it:",
        highlight=False,
    )
    out.print(made.token, highlight=False)


def token_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's (admin)")] = None,
    include_ended: Annotated[
        bool, typer.Option("--all", help="Also revoked and expired tokens")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tokens (never their secrets): your own, or everyone's for an admin."""
    with connect(server, token) as client:
        listing = client.tokens(user, include_ended)
    if as_json:
        _dump(listing)
        return
    out.print(_token_table(listing.items))


def token_revoke(
    token_id: Annotated[int, typer.Argument(help="The token's id (from `token list`)")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: it, and the web sessions signed in with it, stop working at once."""
    with connect(server, token) as client:
        revoked = client.revoke_token(token_id)
    if as_json:
        _dump(revoked)
        return
    out.print(f"revoked token {revoked.id} of {revoked.user} ({revoked.role})", highlight=False)


def register(app: typer.Typer) -> None:
    users = typer.Typer(
        help="Users as records (admin); your own web password (passwd).", no_args_is_help=True
    )
    users.command("add")(user_add)
    users.command("list")(user_list)
    users.command("set")(user_set)
    users.command("disable")(user_disable)
    users.command("enable")(user_enable)
    users.command("passwd")(user_passwd)
    app.add_typer(users, name="user")
    tokens = typer.Typer(help="API tokens: make, list, revoke.", no_args_is_help=True)
    tokens.command("create")(token_create)
    tokens.command("list")(token_list)
    tokens.command("revoke")(token_revoke)
    app.add_typer(tokens, name="token")
    app.command("web-login")(web_login)
