#!/bin/sh
# System packages the ssh backend's integration tests and bench/ssh_fanout.py need
# (network namespaces with their own sshd). Idempotent; run as root on Debian/Ubuntu.
set -eu

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/setup/ssh.sh: run as root (it installs packages)" >&2
    exit 1
fi

need=""
command -v ip >/dev/null 2>&1 || need="$need iproute2"
[ -x /usr/sbin/sshd ] || need="$need openssh-server"
command -v ssh >/dev/null 2>&1 || need="$need openssh-client"
command -v ssh-keygen >/dev/null 2>&1 || need="$need openssh-client"
command -v nft >/dev/null 2>&1 || need="$need nftables"
command -v pdsh >/dev/null 2>&1 || need="$need pdsh"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
command -v nsenter >/dev/null 2>&1 || need="$need util-linux"

if [ -n "$need" ]; then
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq
    # shellcheck disable=SC2086
    timeout 600 apt-get install -y -qq --no-install-recommends $need
fi

# The package's own sshd must not be what the tests talk to; the tests start their own per
# namespace. Do not enable or start the system service (containers have no init anyway).
mkdir -p /run/sshd
chmod 0755 /run/sshd

# Network namespaces must be usable here (fails early with a clear message in containers
# started without CAP_SYS_ADMIN / CAP_NET_ADMIN).
probe="tfcsetup$$"
if ! ip netns add "$probe" 2>/dev/null; then
    echo "tests/setup/ssh.sh: cannot create network namespaces here (need CAP_SYS_ADMIN and CAP_NET_ADMIN)" >&2
    exit 1
fi
ip netns del "$probe"
echo "tests/setup/ssh.sh: ready (iproute2, openssh-server, nftables, pdsh)"
