#!/usr/bin/env bash
# make stress: every unit and in-process package (all but the process-level
# loadtest/e2e and loadtest/soak) under -race, STRESS_COUNT times, while
# STRESS_BURNERS CPU-bound processes run beside them. On these 2-core
# machines that is what a full `make test` does to a package: the e2e and
# soak packages keep both cores busy while it runs. A wait that holds only
# on an idle machine fails here; docs/testing.md says how to read a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
count=${STRESS_COUNT:-3}
burners=${STRESS_BURNERS:-2}
timeout=${STRESS_TIMEOUT:-90m}
log=${STRESS_LOG:-test-artifacts/stress.log}
mkdir -p "$(dirname "$log")"

pids=()
stop_burners() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
	# A busy loop of the shell's own: nothing to install, and it stops
	# with the trap above (or with this script's process group).
	( while :; do :; done ) &
	pids+=($!)
done

pkgs=$($GO list ./... | grep -v -E '/loadtest/(e2e|soak)$')
echo "stress: $(echo "$pkgs" | wc -l) packages, -race -count=$count, $burners CPU burners beside them; log in $log"
start=$(date +%s)
status=0
$GO test -race -count="$count" -timeout "$timeout" $pkgs >"$log" 2>&1 || status=$?
echo "stress: $(( $(date +%s) - start )) s"
grep -E '^( *--- FAIL|FAIL|panic:|WARNING: DATA RACE)' "$log" || true
grep -c '^ok ' "$log" | sed 's/^/stress: packages ok: /'
if [ "$status" -ne 0 ]; then
	echo "stress: FAILED (exit $status); see $log"
	exit "$status"
fi
echo "stress: passed"
