#!/usr/bin/env bash
# Downloads the jars of Apache Kafka (broker) and MirrorMaker 2 listed in
# pom.xml into ${FERRY_CACHE:-$HOME/.cache/ferry}/kafka-<version>/libs and
# prints that folder. Idempotent: a stamp file holding the pom's checksum is
# written after a complete download, so later runs only print the folder.
# Needs only java and mvn (Maven Central reachable).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pom="$here/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
if [[ -z "$version" ]]; then
	echo "fetch.sh: no kafka.version in $pom" >&2
	exit 1
fi

cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
dest="$cache/kafka-$version"
libs="$dest/libs"
stamp="$dest/libs.stamp"
want="$(sha256sum "$pom" | cut -d' ' -f1)"

complete() { [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$libs" ]]; }

if complete; then
	echo "$libs"
	exit 0
fi

mkdir -p "$dest"
# Several test binaries may call this at once: serialise on a lock file.
exec 9>"$dest/fetch.lock"
if command -v flock >/dev/null; then
	flock 9
fi
if complete; then
	echo "$libs"
	exit 0
fi

for tool in java mvn; do
	if ! command -v "$tool" >/dev/null; then
		echo "fetch.sh: $tool not found in PATH" >&2
		exit 1
	fi
done

tmp="$dest/libs.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "fetch.sh: downloading Kafka $version jars into $libs" >&2
# mvn -q prints its errors on stdout; keep stdout for the folder name only.
# Maven 3.8 still emits bare colour resets under -q -B: strip escapes and
# blank lines.
mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp" 2>&1 |
	sed 's/\x1b\[[0-9;]*m//g' | { grep -v '^[[:space:]]*$' || true; } >&2
if ! ls "$tmp"/kafka_2.13-"$version".jar "$tmp"/connect-mirror-"$version".jar >/dev/null 2>&1; then
	echo "fetch.sh: download incomplete: kafka_2.13 or connect-mirror jar missing in $tmp" >&2
	exit 1
fi
rm -rf "$libs"
mv "$tmp" "$libs"
echo "$want" >"$stamp"
echo "$libs"
