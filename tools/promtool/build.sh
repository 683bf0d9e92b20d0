#!/usr/bin/env bash
# Provides promtool (Prometheus's rule checker and rule unit tester) from
# Debian's `prometheus` package, pinned below, unpacked into the Ferry cache
# with `apt-get download` and `dpkg -x`: nothing is installed on the
# machine, and no root is needed once the package lists are there. Prints
# the binary's path on stdout last (progress goes to stderr), as
# tools/jaeger/build.sh does, so loadtest/toolbin finds it.
#
# The version is pinned so that `promtool check rules` and `promtool test
# rules` judge deploy/observability the same on every machine; a stamp next
# to the binary records it, and a lock keeps parallel callers from
# unpacking twice.
set -euo pipefail

version="2.42.0+ds-5+deb12u1"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
root="$cache/prometheus"
bin="$root/usr/bin/promtool"
stamp="$root.stamp"

up_to_date() {
	[[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]
}

if up_to_date; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.prometheus.lock"
flock 9
# Another caller may have unpacked it while we waited for the lock.
if up_to_date; then
	echo "$bin"
	exit 0
fi

echo "promtool: unpacking Debian's prometheus $version into $root" >&2
work="$(mktemp -d "$cache/.prometheus.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# apt-get download writes into the working directory. On a fresh machine
# the package lists may be empty: update them once and try again.
if ! (cd "$work" && apt-get download -qq "prometheus=$version") >&2 2>&1; then
	apt-get update -qq >&2
	if ! (cd "$work" && apt-get download -qq "prometheus=$version") >&2 2>&1; then
		# A Debian security update replaces the pinned build in the
		# archive: take the current one (the same 2.42 in bookworm) rather
		# than fail every test run, and say that the pin needs moving.
		echo "promtool: prometheus=$version is gone from the archive; taking $(apt-cache policy prometheus | awk '/Candidate/ {print $2}'): update the pin in $0" >&2
		(cd "$work" && apt-get download -qq prometheus) >&2
	fi
fi
dpkg -x "$work"/prometheus_*.deb "$work/root"
rm -rf "$root"
# Rename last, so a reader never sees a half-unpacked tree.
mv "$work/root" "$root"
echo "$version" >"$stamp"
"$bin" --version >&2
echo "$bin"
