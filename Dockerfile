# syntax=docker/dockerfile:1
# One image for every Shoal process: shoal-operator, shoal-node and shoal-router (the Helm chart
# and the operator's pods pick the binary with `command:`), plus shoal-client's two small tools:
# shoal-bench (load check) and shoal-sidecar-demo (the app of charts/shoal/examples/sidecar.yaml).
#
#   docker build -t ghcr.io/shoal-dev/shoal:0.1.0 .
#
# The build stage needs no protoc (the .proto files compile in-process with protox) and no
# OpenSSL (kube uses rustls with ring), so the runtime stage is distroless: glibc, CA
# certificates, no shell, running as the unprivileged user 65532 that the chart's pods expect.
#
# Machines that reach no registry (Shoal's CI) build the same image with `.ci/image`: the same
# cargo builds, then `scratch` plus the libraries the binaries link (.ci/image.Containerfile).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Cache the registry and the target directory between builds; copy the binaries out of the
# cache mount because it is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin shoal-node --bin shoal-operator \
# shoal-client's tools: the library and tokio only, no storage engine or Kubernetes client.
 && cargo build --release --locked -p shoal-client --bin shoal-bench --bin shoal-sidecar-demo \
# The router without the embedded cluster: it links no storage engine.
 && cargo build --release --locked -p shoal-router --bin shoal-router --no-default-features \
 && mkdir -p /out \
 && cp target/release/shoal-node target/release/shoal-router target/release/shoal-operator \
       target/release/shoal-bench target/release/shoal-sidecar-demo /out/ \
# Without symbols and line tables the five binaries are about 50 MB instead of 270 MB.
 && strip --strip-all /out/*

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/shoal-dev/shoal" \
      org.opencontainers.image.description="Shoal: a Kubernetes-native sharded cache cluster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# The node's default data directory lives on a volume the chart mounts at /data.
ENTRYPOINT ["shoal-router"]
