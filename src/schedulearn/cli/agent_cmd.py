"""`schedulearn agent`: run this host's node agent (GPU discovery, executors, log shipping).

Thin over `schedulearn.agent.service`: parse the flags into an
`AgentConfig`, run the agent until Ctrl-C or SIGTERM. The server address
comes from `--server`, else `SCHEDULEARN_SERVER`, else the CLI's config file;
several (replicas on one database) may be given, comma-separated or by
repeating `--server`, and the agent fails over between them.

The node's credential, first found of:
1. a join token from `schedulearn node add NAME`: `--join-token-file`,
   `SCHEDULEARN_JOIN_TOKEN`, or `--join-token` (exchanged once for the
   credential, which is then kept 0600 in the state directory);
2. a credential or old-style agent token given: `--token-file`,
   `SCHEDULEARN_AGENT_TOKEN`, or `--token`;
3. the credential stored in the state directory (later starts, and
   `schedulearn up`'s local agent);
4. an agent token an older `schedulearn up` kept in the CLI's config file.
A secret given on the command line is readable by every local user
(`/proc/<pid>/cmdline`), so `--token` and `--join-token` still work but warn.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from schedulearn.protocol import Executor
from schedulearn.startup import loading

ARGV_WARNING = (
    "warning: {flag} puts a secret on the command line, where every local user can read "
    "it (/proc/PID/cmdline); use {instead} instead"
)


class GpuModeOption(StrEnum):
    AUTO = "auto"
    DEVICE_REQUESTS = "device-requests"
    ENV = "env"


class CgroupOption(StrEnum):
    AUTO = "auto"
    V1 = "v1"
    V2 = "v2"


class JobsAsOption(StrEnum):
    OWNER = "owner"
    AGENT = "agent"


def _from_config_file() -> tuple[str | None, str | None]:
    """(server, agent token) from the CLI's config file, when there is one."""
    from schedulearn.cli import config as cli_config

    saved = cli_config.load_file()
    return saved.server, saved.agent_token


def agent(
    ctx: typer.Context,
    server: Annotated[
        list[str] | None,
        typer.Option(
            envvar="SCHEDULEARN_SERVER",
            help="Server URL, e.g. http://gpu-head:8642; for replicas, repeat it or "
            "separate them with commas (the agent fails over between them)",
        ),
    ] = None,
    join_token_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding a one-time join token from `schedulearn node add NAME` "
            "(or set SCHEDULEARN_JOIN_TOKEN); exchanged for this node's credential"
        ),
    ] = None,
    join_token: Annotated[
        str | None,
        typer.Option(
            envvar="SCHEDULEARN_JOIN_TOKEN",
            help="The join token itself (prefer --join-token-file: argv is public)",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding this node's credential or an agent token"),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SCHEDULEARN_AGENT_TOKEN",
            help="Node credential or old-style agent token (prefer --token-file: argv is public)",
        ),
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            help="Declare N virtual GPUs instead of reading NVIDIA GPUs (hosts without them)"
        ),
    ] = None,
    gpu_type: Annotated[
        str | None,
        typer.Option(help="GPU type name, e.g. v100 (default: from NVML, or 'virtual')"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Node name (default: the host name)")] = None,
    executor: Annotated[
        list[Executor] | None,
        typer.Option(help="Executors to offer; repeat for both (default: subprocess)"),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            envvar="SCHEDULEARN_AGENT_LABELS",
            help="A label of this node that jobs may ask for with --constraint, e.g. ib or "
            "a100-80g; repeat for several (env: space-separated)",
        ),
    ] = None,
    docker_url: Annotated[
        str | None,
        typer.Option(
            help="Docker engine, e.g. unix:///run/podman/podman.sock (default: DOCKER_HOST)"
        ),
    ] = None,
    network_mode: Annotated[
        str, typer.Option(help="Network of job containers: none, host, or a network name")
    ] = "none",
    gpu_mode: Annotated[
        GpuModeOption,
        typer.Option(
            help="Containers get GPUs as device requests (NVIDIA runtime) or by "
            "NVIDIA_VISIBLE_DEVICES; auto picks by the runtime"
        ),
    ] = GpuModeOption.AUTO,
    container_init: Annotated[
        bool, typer.Option(help="Run an init in job containers (forwards signals, reaps)")
    ] = True,
    container_ulimit: Annotated[
        list[str] | None,
        typer.Option(help="A ulimit for job containers, e.g. memlock=-1 or nofile=1024:2048"),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="Where the agent keeps job records and logs (default: user state dir)"),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(help="Address other nodes reach this one at (default: route to server)"),
    ] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs to offer (default: all)")] = None,
    memory_gb: Annotated[
        float | None, typer.Option(help="Memory to offer in GB (default: all)")
    ] = None,
    workdir: Annotated[
        str | None,
        typer.Option(help="Working directory of jobs that name none (default: the current one)"),
    ] = None,
    job_path: Annotated[
        str | None,
        typer.Option(
            "--path",
            metavar="DIRS",
            help="PATH of process jobs, absolute directories separated by ':' (default: this "
            "agent's interpreter's directory, then the agent's PATH); see docs/job-environment.md",
        ),
    ] = None,
    job_env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            metavar="KEY=VALUE",
            help="A variable set in every job's environment (process and container); repeat "
            "for several; a job's own env wins",
        ),
    ] = None,
    stop_jobs_on_exit: Annotated[
        bool,
        typer.Option(
            help="On Ctrl-C/SIGTERM stop the jobs; by default they keep running and the "
            "next agent process re-adopts them"
        ),
    ] = False,
    run_jobs_as: Annotated[
        JobsAsOption | None,
        typer.Option(
            help="owner: each job runs as its owner's unix account (needs root; the "
            "default for an agent started as root); agent: every job runs as this agent's "
            "own user (the default otherwise)"
        ),
    ] = None,
    cgroups: Annotated[
        CgroupOption,
        typer.Option(
            help="Containment of process jobs: each run is its own cgroup (cpus, memory, "
            "pids and GPU device limits); auto uses v2 where it is the host's hierarchy, "
            "else the v1 controllers"
        ),
    ] = CgroupOption.AUTO,
    no_cgroups: Annotated[
        bool,
        typer.Option(
            "--no-cgroups",
            help="Run process jobs uncontained, as process groups (the node reports "
            "containment none); only where every job's owner is trusted",
        ),
    ] = False,
    job_pids_max: Annotated[
        int,
        typer.Option(min=0, help="Most processes and threads one run may have (0: no limit)"),
    ] = 4096,
    gpu_device_dir: Annotated[
        Path | None,
        typer.Option(
            hidden=True,
            help="Device nodes of the virtual GPUs (DIR/nvidiaN), for tests of device rules",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
    log_disk_max_bytes: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="SCHEDULEARN_AGENT_LOG_DISK_MAX_BYTES",
            help="Disk this node gives one run's output; past it, lines are counted, not kept",
        ),
    ] = 1024**3,
) -> None:
    """Run the node agent: register this host's GPUs, run the jobs the server sends."""
    with loading():
        from schedulearn.agent import jobenv
        from schedulearn.agent.accounts import JobsAs, default_jobs_as
        from schedulearn.agent.config import (
            AgentConfig,
            address_towards,
            default_name,
            default_state_dir,
            host_cpus,
            host_memory_gb,
        )
        from schedulearn.agent.errors import AgentError
        from schedulearn.agent.service import run_agent

    _set_up_logging(log_level)
    _warn_of_secrets_on_argv(ctx)
    # Not handed down to jobs (the executors strip SCHEDULEARN_* too).
    for name_ in ("SCHEDULEARN_AGENT_TOKEN", "SCHEDULEARN_JOIN_TOKEN"):
        os.environ.pop(name_, None)
    extra_env = _job_env(job_env, job_path)
    node = name or default_name()
    jobs_as = JobsAs(run_jobs_as.value) if run_jobs_as else default_jobs_as()
    where = state_dir or default_state_dir(node, jobs_as is JobsAs.OWNER)
    token, join_token = _credential(node, where, token, token_file, join_token, join_token_file)
    servers, token = _servers(server, token, join_token)
    if not token and not join_token:
        raise typer.BadParameter(
            f"this node has no credential (none stored in {where}); an admin runs "
            f"`schedulearn node add {node}`, and you start the agent with that join token "
            "in a file: --join-token-file PATH (or SCHEDULEARN_JOIN_TOKEN)"
        )
    ulimits = _ulimits(container_ulimit)
    labels = _labels(label)
    config = AgentConfig(
        server=",".join(servers),  # the agent's client fails over along the list
        token=token or "",
        join_token=join_token or None,
        name=node,
        state_dir=where,
        address=address or address_towards(servers[0]),
        gpus=gpus,
        gpu_type=gpu_type,
        cpus=host_cpus() if cpus is None else cpus,
        memory_gb=host_memory_gb() if memory_gb is None else memory_gb,
        executors=tuple(executor or [Executor.SUBPROCESS]),
        labels=labels,
        docker_url=docker_url,
        network_mode=network_mode,
        gpu_mode=gpu_mode.value,
        container_init=container_init,
        container_ulimits=ulimits,
        workdir=workdir,
        job_path=job_path,
        job_env=extra_env,
        stop_jobs_on_exit=stop_jobs_on_exit,
        jobs_as=jobs_as,
        log_disk_max_bytes=log_disk_max_bytes,
        cgroups="off" if no_cgroups else cgroups.value,
        job_pids_max=job_pids_max,
        gpu_device_dir=str(gpu_device_dir) if gpu_device_dir is not None else None,
    )
    # Which `python` and PATH jobs get, said before anything runs (issue: a
    # job's interpreter used to be whatever PATH the agent happened to have).
    for line in jobenv.describe(
        jobenv.job_path(job_path),
        extra_env,
        path_given=job_path is not None,
        processes=Executor.SUBPROCESS in config.executors,
        containers=Executor.DOCKER in config.executors,
        jobs_as_owners=jobs_as is JobsAs.OWNER,
    ):
        typer.echo(f"schedulearn agent: {line}", err=True)
    try:
        run_agent(config)
    except AgentError as exc:
        typer.echo(f"schedulearn agent: {exc}", err=True)
        raise typer.Exit(2) from None


def _set_up_logging(log_level: str) -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per HTTP request would drown the agent's own messages.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _warn_of_secrets_on_argv(ctx: typer.Context) -> None:
    """Warn when a secret was given on the command line (every local user can read it)."""
    for flag, param, instead in (
        ("--token", "token", "--token-file or SCHEDULEARN_AGENT_TOKEN"),
        ("--join-token", "join_token", "--join-token-file or SCHEDULEARN_JOIN_TOKEN"),
    ):
        source = ctx.get_parameter_source(param)
        if source is not None and source.name == "COMMANDLINE":
            typer.echo(ARGV_WARNING.format(flag=flag, instead=instead), err=True)


def _job_env(job_env: list[str] | None, job_path: str | None) -> dict[str, str]:
    """The `--env` variables of every job, after checking them and `--path`."""
    from schedulearn.agent import jobenv

    try:
        extra_env = jobenv.parse_env(job_env or [])
        if job_path is not None:
            jobenv.check_path(job_path)
    except jobenv.JobEnvError as exc:
        raise typer.BadParameter(str(exc)) from None
    return extra_env


def _credential(
    node: str,
    where: Path,
    token: str | None,
    token_file: Path | None,
    join_token: str | None,
    join_token_file: Path | None,
) -> tuple[str | None, str | None]:
    """(token, join token): a secret's file wins over its flag or variable; with
    neither secret given, the credential stored in `where` (steps 1-3 of the
    module docstring; `_servers` does step 4)."""
    from schedulearn.agent import credential

    try:
        if join_token_file is not None:
            join_token = credential.read_secret_file(join_token_file, "join token")
        if token_file is not None:
            token = credential.read_secret_file(token_file, "token")
        if not join_token and not token:
            stored = credential.load(where)
            if stored is not None:
                if stored.node != node:
                    raise typer.BadParameter(
                        f"the credential in {credential.path_in(where)} is node "
                        f"{stored.node!r}'s, not {node!r}; pass --name {stored.node} or "
                        "another --state-dir"
                    )
                token = stored.credential
    except credential.CredentialError as exc:
        raise typer.BadParameter(str(exc)) from None
    return token, join_token


def _servers(
    server: list[str] | None, token: str | None, join_token: str | None
) -> tuple[tuple[str, ...], str | None]:
    """The servers' URLs, and the token: what is missing of either is read from
    the CLI's config file (its token only when no join token was given)."""
    if not server or (token is None and not join_token):
        saved_server, saved_token = _from_config_file()
        server = server or ([saved_server] if saved_server else None)
        token = token or (None if join_token else saved_token)
    if not server:
        raise typer.BadParameter("give the server's URL with --server or SCHEDULEARN_SERVER")
    from schedulearn.failover import ServerListError, parse_servers

    try:
        return parse_servers(server), token
    except ServerListError as exc:
        raise typer.BadParameter(str(exc), param_hint="--server") from None


def _ulimits(container_ulimit: list[str] | None) -> dict[str, tuple[int, int]]:
    from schedulearn.agent.config import parse_ulimit

    try:
        return dict(parse_ulimit(u) for u in container_ulimit or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--container-ulimit") from None


def _labels(label: list[str] | None) -> tuple[str, ...]:
    from schedulearn.core.capabilities import labels_of

    try:
        return tuple(sorted(labels_of(label or [])))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--label") from None


def register(app: typer.Typer) -> None:
    """Add `schedulearn agent` to the app."""
    app.command("agent")(agent)
