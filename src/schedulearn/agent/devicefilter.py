"""A cgroup v2 device rule: a BPF program, attached to a run's cgroup, that refuses
the listed character devices (the node's other GPUs) and allows everything else.

cgroup v2 has no `devices.deny`; the kernel asks a program of type
BPF_PROG_TYPE_CGROUP_DEVICE instead, for each open or mknod of a device by a
process in the cgroup (runc and systemd do the same). The program is small
enough to write out here, instruction by instruction, and load with the
`bpf(2)` system call through ctypes, so the agent needs no eBPF library.
Once attached, the cgroup keeps it: the descriptors are closed at once, and
the program goes when the cgroup is removed.

The program, for a context `{u32 access_type; u32 major; u32 minor}`:

    r2 = access_type & 0xffff    (the device type: 1 block, 2 character)
    r3 = major; r4 = minor
    for each denied (M, m):  if r2 == 2 and r3 == M and r4 == m: return 0
    return 1

Standard library only (the lease guard's modules are).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct

# bpf(2)'s number, per architecture (none elsewhere: rules are then not enforced).
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_PROG_LOAD, _PROG_ATTACH = 5, 8
_PROG_TYPE_CGROUP_DEVICE = 15
_ATTACH_CGROUP_DEVICE = 6
# Several programs may sit on one cgroup and its ancestors (systemd's own, ours):
# the kernel runs them all, and any refusal refuses.
_ALLOW_MULTI = 2
_DEV_CHAR = 2
_ATTR_SIZE = 128


class DeviceFilterError(OSError):
    """The kernel refused to load or attach the program."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


_LDX_W, _AND_K, _JNE_K, _MOV_K, _EXIT = 0x61, 0x57, 0x55, 0xB7, 0x95


def program(denied: tuple[tuple[int, int], ...]) -> bytes:
    """The instructions refusing `denied` character devices (major, minor)."""
    code = [
        _insn(_LDX_W, 2, 1, 0),
        _insn(_AND_K, 2, 0, 0, 0xFFFF),
        _insn(_LDX_W, 3, 1, 4),
        _insn(_LDX_W, 4, 1, 8),
    ]
    for major, minor in denied:
        # Each test jumps past the rest of its block (to the next rule) on a mismatch.
        code += [
            _insn(_JNE_K, 2, 0, 4, _DEV_CHAR),
            _insn(_JNE_K, 3, 0, 3, major),
            _insn(_JNE_K, 4, 0, 2, minor),
            _insn(_MOV_K, 0, 0, 0, 0),
            _insn(_EXIT),
        ]
    code += [_insn(_MOV_K, 0, 0, 0, 1), _insn(_EXIT)]
    return b"".join(code)


def _bpf(command: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise DeviceFilterError(0, f"no bpf system call known on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.syscall(number, command, attr, _ATTR_SIZE))
    if result < 0:
        errno = ctypes.get_errno()
        raise DeviceFilterError(errno, os.strerror(errno))
    return result


def deny(cgroup_dir: str, denied: tuple[tuple[int, int], ...]) -> None:
    """Attach a program refusing `denied` to the cgroup at `cgroup_dir`."""
    code = ctypes.create_string_buffer(program(denied))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    insns = len(code.raw) // 8  # the buffer has one NUL more than the code
    struct.pack_into(
        "<IIQQ",
        attr,
        0,
        _PROG_TYPE_CGROUP_DEVICE,
        insns,
        ctypes.addressof(code),
        ctypes.addressof(license_),
    )
    prog = _bpf(_PROG_LOAD, attr)
    try:
        target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            attach = ctypes.create_string_buffer(_ATTR_SIZE)
            struct.pack_into("<IIII", attach, 0, target, prog, _ATTACH_CGROUP_DEVICE, _ALLOW_MULTI)
            _bpf(_PROG_ATTACH, attach)
        finally:
            os.close(target)
    finally:
        os.close(prog)


def works(cgroup_dir: str) -> str:
    """ "" when a device program can be attached under `cgroup_dir` (tried on a
    throwaway child), else why not."""
    probe = os.path.join(cgroup_dir, "device-probe")
    try:
        os.makedirs(probe, exist_ok=True)
        deny(probe, ())
    except OSError as exc:
        return str(exc)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return ""
