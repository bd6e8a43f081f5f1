# syntax=docker/dockerfile:1.7
#
# talos-gen: a small, non-root image holding only the static-ish binary.
# The support matrix (matrix/), the named schematics (schematics/) and the
# status page template (templates/) are compiled into the binary
# (include_str!), so the runtime stage needs no data files.
#
#   docker build -t ghcr.io/cozystack/talos-gen:latest .
#   docker run --rm -p 8080:8080 -v talos-gen-cache:/var/cache/talos-gen \
#     ghcr.io/cozystack/talos-gen:latest serve --listen 0.0.0.0:8080
#
# The manifests in mirror/ run this image as UID/GID 65532 with a read-only
# root filesystem; the store lives on the volume at /var/cache/talos-gen.
#
# Build args (the defaults build from source on the public base images):
#   BUILDER_IMAGE  the Rust toolchain image of the build stage;
#   RUNTIME_IMAGE  the base of the final image: glibc, libgcc, CA
#                  certificates at /etc/ssl/certs, a passwd entry for 65532;
#   BINARY_FROM    the stage or image holding /out/talos-gen and
#                  /out/var/cache/talos-gen: `build` (default) compiles them
#                  here; an image made from a binary built on the host skips
#                  the build stage (the runtime libraries then have to match
#                  that host). tests/container_image.rs builds it that way
#                  with podman, no base image pulled:
#   podman build --build-arg RUNTIME_IMAGE=localhost/rt \
#     --build-arg BINARY_FROM=localhost/bin -t talos-gen .

ARG RUST_VERSION=1.95
ARG DEBIAN_SUITE=bookworm
ARG BUILDER_IMAGE=docker.io/library/rust:${RUST_VERSION}-${DEBIAN_SUITE}
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARY_FROM=build

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
# liblzma is built from source and linked statically (lzma-sys), so the
# runtime image needs only glibc; TLS is rustls (no OpenSSL).
ENV LZMA_API_STATIC=1 \
    CARGO_TERM_COLOR=never \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_PROFILE_RELEASE_LTO=thin \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=4
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY matrix ./matrix
COPY schematics ./schematics
COPY templates ./templates
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin talos-gen \
 && install -D -m 0755 target/release/talos-gen /out/talos-gen \
 && /out/talos-gen --version \
 && /out/talos-gen matrix check --talos v1.13 --kubernetes v1.35

# The cache directory, owned by the non-root user (an empty volume mounted
# there inherits it; Kubernetes' fsGroup covers PVCs).
RUN install -d -m 0750 -o 65532 -g 65532 /out/var/cache/talos-gen

FROM ${BINARY_FROM} AS binary

# distroless cc (the default): glibc, libgcc, CA certificates, tzdata; no
# shell, no package manager; the `nonroot` tag runs as 65532:65532.
FROM ${RUNTIME_IMAGE}
COPY --from=binary /out/talos-gen /usr/local/bin/talos-gen
COPY --from=binary --chown=65532:65532 /out/var/cache/talos-gen /var/cache/talos-gen
USER 65532:65532
ENV TALOS_GEN_LISTEN=0.0.0.0:8080 \
    TALOS_GEN_CACHE_DIR=/var/cache/talos-gen \
    TALOS_GEN_LOG_FORMAT=json
VOLUME ["/var/cache/talos-gen"]
EXPOSE 8080
# Kubernetes uses the HTTP probes (/healthz, /readyz); distroless has no
# shell or curl for a Docker HEALTHCHECK.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/talos-gen"]
CMD ["serve"]
