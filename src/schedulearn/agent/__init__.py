"""The node agent: runs on each GPU host, takes work from the server, runs jobs.

It discovers the host's GPUs (`gpus`), registers them and heartbeats
(`daemon`, whose `Agent` runs the parts: `enrolment`, `recovery`, the work
loop that long-polls for work, `workloop`, and the set of runners,
`runners`; CONTRIBUTING.md lists them), runs each job through an executor
(`executors.process`: a process group; `executors.container`: Docker or
Podman) with the command line and environment its launcher builds
(`launchers`), ships its output (`shipper`) and reports its exit (`jobs`),
keeping what it must not forget across a restart in its state directory
(`state`). It imports `schedulearn.protocol`, never `schedulearn.server`.
"""
