#!/usr/bin/env bash
# Installs what `cargo build -p rewind-cli --features peers` needs: PMDK's
# libpmemobj (headers, library, pkg-config file), pkg-config, a C compiler
# for the C baseline loop and the shims, and the B+-tree benchmarks' peers:
# Berkeley DB (libdb-dev), LMDB (liblmdb-dev) and SQLite (libsqlite3-dev,
# linked by rusqlite; redb is a pure-Rust crate). Debian/Ubuntu packages; idempotent
# (apt-get install skips what is already there). Runs as root, or through
# sudo otherwise. The default build and `cargo test --workspace` need none
# of this.
set -euo pipefail

PACKAGES=(libpmemobj-dev pkg-config gcc libc6-dev libdb-dev liblmdb-dev libsqlite3-dev)

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
for header in /usr/include/db.h /usr/include/lmdb.h /usr/include/sqlite3.h; do
    [ -f "$header" ] || { echo "install-peers.sh: $header missing after install" >&2; exit 1; }
done
echo "install-peers.sh: libpmemobj $(pkg-config --modversion libpmemobj), sqlite $(pkg-config --modversion sqlite3 2>/dev/null || echo '?'), $(gcc --version | head -n1)"
