# syntax=docker/dockerfile:1.7
#
# The Memcached operator's image: built with the Rust toolchain, run as a single static
# binary on distroless (CA certificates, no libc, no shell, no package manager), as user
# 65532 (distroless's `nonroot`), which config/manager/manager.yaml also asks for.
#
#   docker build -t <registry>/memcached-operator:<tag> .
#   make deploy IMG=<registry>/memcached-operator:<tag>
#
# It needs BuildKit (the default builder since Docker 23) for its cache mounts. It has not
# been built in this repository's development environment, which has no container engine;
# `hack/build-dist.sh` is what it runs (the release profile with whole-program optimisation,
# linked statically, see Cargo.toml), and that binary is tested and benchmarked.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The sources are bind-mounted rather than copied, and the cargo registry and target
# directory are cache mounts: a change to one source file rebuilds that crate and what
# depends on it, not every dependency, and no layer holds the sources or the build tree.
# --locked builds exactly what Cargo.lock pins. The binary is copied out of the cache mount
# because a cache mount is not part of the image.
RUN --mount=type=bind,target=/src \
    --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/target,sharing=locked \
    export CARGO_TARGET_DIR=/target \
    && bin=$(/src/hack/build-dist.sh) \
    && install -D -m 0755 "$bin" /out/memcached-operator

# static-debian12 carries CA certificates, /etc/passwd and tzdata, and no libc: the binary
# brings its own; its `nonroot` tag runs as 65532:65532.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="memcached-operator" \
      org.opencontainers.image.description="Keeps a Deployment of memcached Pods scaled to each Memcached resource's spec.size" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/memcached-operator /memcached-operator
USER 65532:65532
# 8080 metrics, 8081 health probes, 9443 admission webhooks.
EXPOSE 8080 8081 9443
ENTRYPOINT ["/memcached-operator"]
