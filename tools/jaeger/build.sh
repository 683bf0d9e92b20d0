#!/usr/bin/env bash
# Builds the Jaeger all-in-one binary (Jaeger v2, github.com/jaegertracing/
# jaeger/cmd/jaeger, pinned as a Go tool in this module) into the Ferry cache
# once, and prints the binary's path on stdout (progress goes to stderr).
#
# A stamp next to the binary holds the sha256 of go.mod and go.sum, so the
# build (about 3 minutes on cold Go caches, 2 cores) runs again only when the
# pin changes. A lock keeps parallel callers (several test packages at once)
# from building twice.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
bin="$cache/bin/jaeger"
stamp="$bin.stamp"

mkdir -p "$cache/bin"

want="$(cd "$src" && cat go.mod go.sum | sha256sum | cut -d' ' -f1)"

up_to_date() {
	[[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}

if up_to_date; then
	echo "$bin"
	exit 0
fi

exec 9>"$cache/bin/.jaeger.lock"
flock 9
# Another caller may have finished the build while we waited for the lock.
if up_to_date; then
	echo "$bin"
	exit 0
fi

echo "jaeger: building $bin (minutes on a cold Go cache)" >&2
start=$SECONDS
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# GOWORK=off: a go.work higher up must not pull this module into another build.
# The tool directive in go.mod pins the version; building the package path
# inside this module uses exactly that pin and go.sum.
(cd "$src" && GOWORK=off GOFLAGS=-buildvcs=false \
	go build -trimpath -ldflags='-s -w' -o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger) >&2
# Rename last, so a reader never sees a half-written binary.
mv -f "$tmp" "$bin"
echo "$want" >"$stamp"
echo "jaeger: built in $((SECONDS - start))s, $(du -h "$bin" | cut -f1)" >&2
echo "$bin"
