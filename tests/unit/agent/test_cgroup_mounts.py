"""How the agent reads what cgroups a host mounts and where its own cgroup is
(`agent.cgroupmounts.mounts`, `own_cgroups`), from the files' real formats: a v1 host
with an empty v2 `unified` hierarchy (this CI's machines), a pure v2 host, and a
container whose cgroup namespace shows its own cgroup as the mount's root."""

from __future__ import annotations

from schedulearn.agent.cgroupmounts import Mount, _inside, mounts, own_cgroups

HYBRID = """\
22 21 0:20 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
25 22 0:23 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
26 22 0:24 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
27 22 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
28 22 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
29 22 0:27 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
"""

PURE_V2 = "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_v1_controllers_and_the_unified_hierarchy_are_told_apart() -> None:
    found = mounts(HYBRID)
    assert [(m.fstype, m.point) for m in found] == [
        ("cgroup", "/sys/fs/cgroup/memory"),
        ("cgroup", "/sys/fs/cgroup/freezer"),
        ("cgroup", "/sys/fs/cgroup/cpu,cpuacct"),
        ("cgroup2", "/sys/fs/cgroup/unified"),
        ("cgroup", "/sys/fs/cgroup/systemd"),
    ]
    assert {"cpu", "cpuacct"} <= found[2].options
    assert mounts(PURE_V2) == [
        Mount("cgroup2", "/", "/sys/fs/cgroup", frozenset({"rw", "nsdelegate"}))
    ]


def test_the_agents_own_cgroup_is_read_per_controller_and_for_v2() -> None:
    own = own_cgroups(
        "9:name=systemd:/\n4:memory:/process_api/a06\n1:cpu,cpuacct:/\n0::/system.slice/x\n"
    )
    assert own["memory"] == "/process_api/a06"
    assert own["cpu"] == own["cpuacct"] == "/"
    assert own[""] == "/system.slice/x"


def test_a_namespaced_mount_root_is_not_counted_twice() -> None:
    mount = Mount("cgroup2", "/docker/abc", "/sys/fs/cgroup", frozenset())
    assert _inside(mount, "/docker/abc/agent") == "/sys/fs/cgroup/agent"
    assert _inside(Mount("cgroup", "/", "/sys/fs/cgroup/memory", frozenset()), "/a/b") == (
        "/sys/fs/cgroup/memory/a/b"
    )
