#!/bin/sh
# Install what the Docker integration tests need (idempotent; run as root on Debian/Ubuntu):
#   docker.io       dockerd + containerd + runc + docker-init (the tests start a private dockerd)
#   docker-compose  compose v1, for `docker-compose config -q` on generated files
#   debootstrap     builds the test base image locally (no image registry is reachable)
set -eu
if [ "$(id -u)" != 0 ]; then
    echo "tests/setup/docker.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi
missing=""
command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
if [ -n "$missing" ]; then
    echo "tests/setup/docker.sh: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
else
    echo "tests/setup/docker.sh: docker.io, docker-compose and debootstrap already installed"
fi
