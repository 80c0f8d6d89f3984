#!/bin/sh
# System packages the slurm backend's integration tests and bench/slurm.py need: Slurm 22.05
# (slurmctld, slurmd, the client commands) and munge, on Debian 12. Idempotent; run as root.
# The tests start their own munged/slurmctld/slurmd (tests/labs/slurm.py) with
# their own config and state dirs; the packaged services are neither enabled nor started here.
set -eu

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/setup/slurm.sh: run as root (it installs packages)" >&2
    exit 1
fi

need=""
[ -x /usr/sbin/slurmctld ] || need="$need slurmctld"
[ -x /usr/sbin/slurmd ] || need="$need slurmd"
command -v sbatch >/dev/null 2>&1 || need="$need slurm-client"
[ -x /usr/sbin/munged ] || need="$need munge"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v nsenter >/dev/null 2>&1 || need="$need util-linux"

if [ -n "$need" ]; then
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq
    # policy-rc.d: the packages' postinst must not start system daemons (containers have no
    # init anyway, and a system slurmd would fight the lab's).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    # shellcheck disable=SC2086
    timeout 900 apt-get install -y -qq --no-install-recommends $need
fi

echo "tests/setup/slurm.sh: ready ($(slurmctld -V 2>/dev/null || echo slurmctld ?), munge)"
