#!/usr/bin/env bash
# Builds the Consul 1.15.4 dev agent (this module) into the Ferry cache once,
# and prints the binary's path on stdout (progress goes to stderr).
#
# A stamp next to the binary holds the sha256 of go.mod, go.sum and main.go, so
# the slow build (8 to 9 minutes on cold Go caches, 2 cores) runs again only
# when those change. A lock keeps parallel callers (several test packages at
# once) from building twice.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
bin="$cache/bin/consul-dev"
stamp="$bin.stamp"

mkdir -p "$cache/bin"

want="$(cd "$src" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1)"

up_to_date() {
	[[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}

if up_to_date; then
	echo "$bin"
	exit 0
fi

exec 9>"$cache/bin/.consul-dev.lock"
flock 9
# Another caller may have finished the build while we waited for the lock.
if up_to_date; then
	echo "$bin"
	exit 0
fi

echo "consul-dev: building $bin (minutes on a cold Go cache)" >&2
start=$SECONDS
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# GOWORK=off: a go.work higher up must not pull this module into another build.
(cd "$src" && GOWORK=off GOFLAGS=-buildvcs=false \
	go build -trimpath -ldflags='-s -w' -o "$tmp" .) >&2
# Rename last, so a reader never sees a half-written binary.
mv -f "$tmp" "$bin"
echo "$want" >"$stamp"
echo "consul-dev: built in $((SECONDS - start))s, $(du -h "$bin" | cut -f1)" >&2
echo "$bin"
