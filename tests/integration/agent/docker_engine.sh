#!/usr/bin/env bash
# Make sure a Docker engine answers on the default socket, and that the local
# test image exists; idempotent, safe to run again and from several places.
#
#   tests/integration/agent/docker_engine.sh          # engine + image
#   SCHEDULEARN_TEST_IMAGE=name:tag docker_engine.sh  # another image name
#
# No registry is reachable here, so the image is imported from a busybox
# rootfs (busybox-static). The engine is started with no default bridge:
# test containers use network mode `none` or `host` only.
# Exit status 0 when `docker info` answers and the image is there.
set -euo pipefail

IMAGE="${SCHEDULEARN_TEST_IMAGE:-schedulearn-test-busybox:latest}"
LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"

have() { command -v "$1" >/dev/null 2>&1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

if ! docker info >/dev/null 2>&1; then
    if ! have dockerd; then
        echo "docker_engine.sh: installing docker.io" >&2
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io >&2
    fi
    if ! docker info >/dev/null 2>&1; then
        # A stale pid file from a killed engine stops a new one from starting.
        if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
            as_root rm -f /var/run/docker.pid
        fi
        if ! pgrep -x dockerd >/dev/null 2>&1; then
            echo "docker_engine.sh: starting dockerd (log: $LOG)" >&2
            as_root nohup dockerd --bridge=none --iptables=false >"$LOG" 2>&1 &
        fi
        for _ in $(seq 1 120); do
            docker info >/dev/null 2>&1 && break
            sleep 0.5
        done
    fi
    if ! docker info >/dev/null 2>&1; then
        echo "docker_engine.sh: dockerd did not come up; last lines of $LOG:" >&2
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    if [ ! -x /bin/busybox ] || ! /bin/busybox --list >/dev/null 2>&1; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y busybox-static >&2
    fi
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
    tar -C "$root" -c . | docker import \
        --change 'ENV PATH=/bin' --change 'CMD ["/bin/sh"]' - "$IMAGE" >/dev/null
    echo "docker_engine.sh: built image $IMAGE" >&2
fi
echo "$IMAGE"
