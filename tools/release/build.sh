#!/usr/bin/env bash
# Builds Ferry's shipped binaries as they are released: static
# (CGO_ENABLED=0, so they run FROM scratch and on any Linux), -trimpath (no
# build machine paths inside), and stamped with the version and commit that
# --version prints.
#
#   tools/release/build.sh OUTDIR
#
# VERSION and COMMIT come from the environment, else from git. GOOS and
# GOARCH are honoured as usual.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: build.sh OUTDIR}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
pkg=github.com/ferry-replicator/ferry/pkg/service
mkdir -p "$out"
# ferryctl, the operators' tool, is built the same way (static, stamped).
for svc in fetcher writer ferryctl; do
  name=ferry-$svc
  [ "$svc" = ferryctl ] && name=ferryctl
  CGO_ENABLED=0 ${GO:-go} build -trimpath \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" \
    -o "$out/$name" "./services/$svc"
done
