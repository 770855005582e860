# syntax=docker/dockerfile:1.7
#
# The {{project_name}} manager's image: built with the Rust toolchain, run on distroless as
# user 65532 (what config/manager/manager.yaml asks for).
#
#   make docker-build IMG=<registry>/{{project_name}}:<tag>
#
# It needs BuildKit (the default builder since Docker 23) for its mounts.{{docker_note}}

ARG RUST_VERSION={{rust_version}}

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The sources are bind-mounted rather than copied, and cargo's registry and target directory
# are cache mounts: a rebuild compiles what changed. The binary is copied out of the cache.
RUN --mount=type=bind,target=/src,rw \
{{docker_runtime_mount}}    --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/target,sharing=locked \
    CARGO_TARGET_DIR=/target cargo build --release \
    && install -D -m 0755 /target/release/{{project_name}} /out/manager

# distroless/cc: glibc and CA certificates, no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/manager /manager
USER 65532:65532
# 8081 health probes, 8443 metrics, 9443 admission webhooks.
EXPOSE 8081 8443 9443
ENTRYPOINT ["/manager"]
