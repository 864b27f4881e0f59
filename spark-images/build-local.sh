#!/usr/bin/env bash
# Build the acidtables image with Debian's own tools, where no Docker engine or registry is at hand
# (CI, and any Debian machine with root): debian:bookworm-slim is made locally with mmdebstrap and
# imported under that name, then `buildah bud` builds spark-images/Dockerfile on it.
#
#   spark-images/build-local.sh [TAG]      (default localhost/acidtables:dev)
#
# Prints the build time and the image size (bench/README.md keeps the figures). ACIDTABLES_BUILD_CA
# names a CA bundle for pip and curl inside the build (default: the host's, which also trusts a
# TLS-intercepting proxy the host trusts).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tag="${1:-localhost/acidtables:dev}"
ca="${ACIDTABLES_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}"

need=()
for tool in mmdebstrap buildah podman runc; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ "${#need[@]}" -gt 0 ]; then
    echo "build-local: installing ${need[*]} (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! podman image exists debian:bookworm-slim; then
    # what the official slim image is: minbase without documentation, manuals or translations
    base="$(mktemp -d)"
    trap 'rm -rf "$base"' EXIT
    mmdebstrap --quiet --variant=minbase \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' --aptopt='APT::Install-Recommends "false"' \
        bookworm "$base/bookworm-slim.tar"
    podman import --quiet "$base/bookworm-slim.tar" docker.io/library/debian:bookworm-slim >/dev/null
    echo "build-local: debian:bookworm-slim made with mmdebstrap"
fi

# --isolation chroot: the RUN steps need no cgroups (sandboxes and nested containers lack them)
start=$(date +%s)
buildah bud --quiet --isolation chroot --network host --layers \
    -v "$ca:/etc/ssl/build-ca.crt:ro" --build-arg PIP_CERT=/etc/ssl/build-ca.crt \
    --build-arg CURL_CA_BUNDLE=/etc/ssl/build-ca.crt \
    -f spark-images/Dockerfile -t "$tag" . >/dev/null
seconds=$(( $(date +%s) - start ))
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "build-local: built $tag in ${seconds} s, $(( size / 1000000 )) MB"
