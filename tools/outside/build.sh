#!/usr/bin/env bash
# Provides the clients outside Go that `make drill-outside` drives
# (docs/disaster-recovery.md, "Checked with clients outside Go"):
#
#   - a Python venv in the Ferry cache with confluent-kafka pinned below
#     (its wheel bundles librdkafka), for loadtest/outside/app.py;
#   - kcat from Debian's package, for the byte-for-byte dumps.
#
# Idempotent: a stamp next to the venv records the pinned version, and a
# lock keeps parallel callers from building it twice. Prints the venv's
# python on stdout last (progress goes to stderr), as tools/promtool/build.sh
# prints its binary, so loadtest/toolbin finds it.
set -euo pipefail

confluent_kafka="2.16.2"
kcat_version="1.7.1-2"
cache="${FERRY_CACHE:-$HOME/.cache/ferry}"
venv="$cache/outside-venv"
stamp="$venv.stamp"
python="${PYTHON:-python3}"

# kcat: Debian's package, installed as the chromium and buildah targets
# install theirs (needs root, as on CI). On a fresh machine the package
# lists may be empty: update them first.
if ! command -v kcat >/dev/null; then
	echo "outside: installing Debian's kcat $kcat_version" >&2
	apt-get update -qq >&2
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "kcat=$kcat_version" >&2; then
		# A Debian update replaces the pinned build: take the current
		# one rather than fail, and say that the pin needs moving.
		echo "outside: kcat=$kcat_version is gone from the archive; taking the candidate: update the pin in $0" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >&2
	fi
fi

# Debian's python3 makes venvs only with its python3-venv package.
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
	echo "outside: installing Debian's python3-venv" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
fi

up_to_date() {
	[[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$confluent_kafka" ]]
}

if ! up_to_date; then
	mkdir -p "$cache"
	exec 9>"$cache/.outside-venv.lock"
	flock 9
	# Another caller may have built it while we waited for the lock.
	if ! up_to_date; then
		echo "outside: building $venv with confluent-kafka $confluent_kafka" >&2
		# A venv's scripts name its folder, so it is built in place; the
		# stamp, written last, says it is complete.
		rm -rf "$venv" "$stamp"
		"$python" -m venv "$venv" >&2
		"$venv/bin/pip" install -q "confluent-kafka==$confluent_kafka" >&2
		echo "$confluent_kafka" >"$stamp"
	fi
fi

"$venv/bin/python" -c 'import confluent_kafka as c; print("outside: confluent-kafka", c.__version__, "librdkafka", c.libversion()[0])' >&2
kcat -V 2>&1 | grep "^Version" >&2
echo "$venv/bin/python"
