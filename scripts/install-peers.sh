#!/usr/bin/env bash
# Installs what `cargo build -p rewind-cli --features peers` needs: PMDK's
# libpmemobj (headers, library, pkg-config file), pkg-config, and a C
# compiler for the C baseline loop. Debian/Ubuntu packages; idempotent
# (apt-get install skips what is already there). Runs as root, or through
# sudo otherwise. The default build and `cargo test --workspace` need none
# of this.
set -euo pipefail

PACKAGES=(libpmemobj-dev pkg-config gcc libc6-dev)

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-peers.sh: not root and no sudo: run it as root" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${PACKAGES[@]}"

pkg-config --modversion libpmemobj >/dev/null \
    || { echo "install-peers.sh: libpmemobj not found by pkg-config after install" >&2; exit 1; }
echo "install-peers.sh: libpmemobj $(pkg-config --modversion libpmemobj), $(gcc --version | head -n1)"
