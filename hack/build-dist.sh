#!/usr/bin/env bash
# Builds the Memcached operator as it ships: the `dist` profile (see Cargo.toml), linked
# statically (`crt-static`), so the process maps one file and not also libc, libm and the
# dynamic loader, whose pages an idle operator would otherwise hold (2 MiB of its 10).
# Prints the binary's path. glibc's static name lookup (files and DNS) is built in since
# glibc 2.34; the image builder (Debian bookworm) and this machine have 2.36.
#
# An explicit --target keeps crt-static off the build scripts and proc macros, which run on
# the host as shared objects; the binary lands in target/<host triple>/dist/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
host=$(rustc -vV | sed -n 's/^host: //p')
target_dir=${CARGO_TARGET_DIR:-$root/target}
echo "build-dist: cargo build --profile dist --target $host -p memcached-operator (static; 10-20 min from scratch)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --locked --profile dist --target "$host" -p memcached-operator \
  --manifest-path "$root/Cargo.toml" "$@" >&2
echo "$target_dir/$host/dist/memcached-operator"
