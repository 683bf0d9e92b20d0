#!/usr/bin/env bash
# Builds Ferry's two images without a daemon: the release binaries
# (tools/release/build.sh: static, version and commit stamped), then one
# `buildah bud` of deploy/image/Containerfile per tier, in a context holding
# only the binaries and the host's CA bundle.
#
#   deploy/image/build.sh PREFIX TAG [BUILDAH_ROOT]
#
# builds PREFIX-fetcher:TAG and PREFIX-writer:TAG (make image: PREFIX
# localhost/ferry, TAG the version). BUILDAH_ROOT, when given, is a private
# storage folder (the test uses its own); buildah's default store otherwise.
# VERSION and COMMIT come from the environment, else from git.
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=${1:?usage: build.sh PREFIX TAG [BUILDAH_ROOT]}
tag=${2:?usage: build.sh PREFIX TAG [BUILDAH_ROOT]}
root=${3:-}
command -v buildah >/dev/null || { echo "build.sh: buildah is not installed (make buildah installs it)" >&2; exit 1; }
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
ca=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca" ] || { echo "build.sh: $ca missing: install Debian's ca-certificates" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
tools/release/build.sh "$ctx"
cp "$ca" "$ctx/ca-certificates.crt"

store=(--storage-driver vfs)
if [ -n "$root" ]; then
  store+=(--root "$root/storage" --runroot "$root/run")
fi
for tier in fetcher writer; do
  buildah "${store[@]}" bud --isolation chroot --quiet --build-arg "TIER=$tier" \
    --label "org.opencontainers.image.title=ferry-$tier" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$COMMIT" \
    -f deploy/image/Containerfile -t "$prefix-$tier:$tag" "$ctx" >/dev/null
  echo "built $prefix-$tier:$tag ($VERSION, commit $COMMIT)"
done
