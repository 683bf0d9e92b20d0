#!/usr/bin/env bash
# Runs a single-node Apache Kafka 4.x (KRaft, combined broker+controller) on
# 127.0.0.1 for tests and benchmarks.
#
#   cluster.sh start NAME PORT CONTROLLER_PORT DATADIR
#   cluster.sh stop DATADIR
#
# start writes DATADIR/server.properties, formats DATADIR/data on first use
# (kept across restarts), starts the broker in the background with its output
# in DATADIR/kafka.log and its pid in DATADIR/kafka.pid, and returns once the
# broker accepts connections on PORT. stop sends SIGTERM, waits up to 60 s, then
# SIGKILL. Jars come from FERRY_KAFKA_LIBS or fetch.sh. Env knobs:
#   KAFKA_HEAP_OPTS        default "-Xms1g -Xmx1g" (as Kafka's own scripts)
#   FERRY_KAFKA_LOG_LEVEL  default WARN (read by log4j2.properties)
#   FERRY_KAFKA_START_TIMEOUT seconds, default 120
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
	echo "usage: $0 start NAME PORT CONTROLLER_PORT DATADIR | stop DATADIR" >&2
	exit 2
}

libs() {
	if [[ -n "${FERRY_KAFKA_LIBS:-}" ]]; then
		echo "$FERRY_KAFKA_LIBS"
	else
		"$here/fetch.sh"
	fi
}

alive() { kill -0 "$1" 2>/dev/null; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
	local name="$1" port="$2" cport="$3" dir="$4"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	local pidfile="$dir/kafka.pid"
	if [[ -f "$pidfile" ]] && alive "$(cat "$pidfile")"; then
		echo "cluster.sh: $name already running, pid $(cat "$pidfile")" >&2
		exit 1
	fi
	local lib
	lib="$(libs)"

	# Single node on loopback; keep in sync with defaultServerProps in
	# loadtest/kafkabroker/broker.go.
	cat >"$dir/server.properties" <<PROPS
# Written by loadtest/kafka/cluster.sh for cluster "$name".
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# After a SIGKILL the restarted node waits for the old broker session to
# expire before it can register again: 4 s instead of the default 9 s.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
auto.create.topics.enable=false
PROPS

	# Heap and flags as Kafka's kafka-run-class.sh; keep in sync with
	# loadtest/kafkabroker (jvmFlags).
	local -a jvm=(
		${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g}
		-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
		-Dlog4j2.configurationFile="$here/log4j2.properties"
	)

	if [[ ! -f "$dir/data/meta.properties" ]]; then
		# A KRaft cluster id is 16 random bytes in URL-safe base64 without
		# padding; one starting with '-' would be read as a flag, so retry.
		local id="-"
		while [[ "$id" == -* ]]; do
			id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
		done
		java -Xmx256m -Dlog4j2.configurationFile="$here/log4j2.properties" \
			-cp "$lib/*" kafka.tools.StorageTool format \
			-t "$id" -c "$dir/server.properties" >>"$dir/kafka.log" 2>&1 || {
			echo "cluster.sh: format failed, see $dir/kafka.log" >&2
			tail -n 20 "$dir/kafka.log" >&2
			exit 1
		}
	fi

	# setsid: own process group and session, so the broker outlives this
	# script and its terminal, and stop can signal exactly it.
	setsid java "${jvm[@]}" -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
		>>"$dir/kafka.log" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$pidfile"

	# Kafka 4 binds the client port only when it enables request processing,
	# after the broker has caught up with the metadata log and been unfenced
	# (seen in its INFO log: "Enabling request processing" then "Kafka Server
	# started" within milliseconds), so an accepted connection means ready.
	local timeout="${FERRY_KAFKA_START_TIMEOUT:-120}" waited=0
	until port_open "$port"; do
		if ! alive "$pid"; then
			echo "cluster.sh: $name exited during start-up, see $dir/kafka.log" >&2
			tail -n 20 "$dir/kafka.log" >&2
			rm -f "$pidfile"
			exit 1
		fi
		if ((waited >= timeout * 5)); then
			echo "cluster.sh: $name not listening after ${timeout}s, see $dir/kafka.log" >&2
			exit 1
		fi
		sleep 0.2
		waited=$((waited + 1))
	done
	echo "cluster.sh: $name up on 127.0.0.1:$port, pid $pid, data $dir" >&2
}

stop() {
	local dir="$1"
	local pidfile="$dir/kafka.pid"
	if [[ ! -f "$pidfile" ]]; then
		echo "cluster.sh: no pid file in $dir" >&2
		return 0
	fi
	local pid
	pid="$(cat "$pidfile")"
	if alive "$pid"; then
		# setsid made the broker a process group leader: signal the group.
		# SIGCONT in case it was paused (SIGSTOP) by a failure test.
		kill -TERM -- "-$pid" 2>/dev/null || true
		kill -CONT -- "-$pid" 2>/dev/null || true
		local waited=0
		while alive "$pid" && ((waited < 300)); do
			sleep 0.2
			waited=$((waited + 1))
		done
		if alive "$pid"; then
			echo "cluster.sh: pid $pid ignored SIGTERM for 60s, killing" >&2
			kill -KILL -- "-$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$pidfile"
}

case "${1:-}" in
start)
	[[ $# -eq 5 ]] || usage
	start "$2" "$3" "$4" "$5"
	;;
stop)
	[[ $# -eq 2 ]] || usage
	stop "$2"
	;;
*) usage ;;
esac
