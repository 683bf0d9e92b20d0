package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/procgroup"
)

// MM2Options configures a MirrorMaker 2 process in dedicated mode that
// replicates one way, from the source cluster to the target cluster.
type MM2Options struct {
	// SourceAlias and TargetAlias name the clusters. With the default
	// replication policy a source topic T appears on the target as
	// "<SourceAlias>.T". Defaults "source" and "target".
	SourceAlias, TargetAlias string
	// SourceAddr and TargetAddr are the bootstrap addresses. Required.
	SourceAddr, TargetAddr string
	// Topics is the regex of source topics to replicate. Default ".*".
	Topics string
	// Props are extra mm2.properties entries; they override the defaults.
	// Keys are top-level ("tasks.max"), per cluster ("<alias>.producer.linger.ms",
	// "<alias>.consumer.fetch.max.bytes") or per flow
	// ("<src>-><dst>.emit.checkpoints.enabled"). Exactly-once delivery:
	// MM2ExactlyOnceProps (checked to work with one MM2 node; the brokers
	// support transactions).
	Props map[string]string
	// Dir receives mm2.properties and mm2.log. Empty: a new temporary
	// directory, removed by Stop.
	Dir string
	// Heap is the JVM heap, used for both -Xms and -Xmx. Default "1g".
	Heap string
	// JVMArgs are extra java arguments placed before the main class.
	JVMArgs []string
}

// MirrorMaker is a running MirrorMaker 2 process. Its methods are not safe
// for concurrent use.
type MirrorMaker struct {
	opts    MM2Options
	libs    string
	ownDir  bool
	logPath string
	proc    *procgroup.Proc
}

const mm2StopTimeout = 30 * time.Second

// defaultMM2Props replicate one flow, with replication factor 1 for every
// topic MM2 creates, since each cluster has a single broker. Also:
//   - heartbeats of the disabled reverse flow are off: otherwise MM2 runs a
//     whole second Connect herder (consumer group, internal topics) just to
//     emit them, which costs start-up time and benchmark CPU;
//   - plugin.discovery=service_load: MM2 otherwise scans the classpath for
//     plugins at start, which takes seconds and logs a WARN suggesting this.
//     It is read once at top level and once per herder from the herder's
//     target cluster settings, hence two entries;
//   - topic and group lists are refreshed every 10 s instead of 10 min, so a
//     topic created after start-up is picked up within a test's patience;
//   - ACL sync is off: the brokers have no authorizer and would answer every
//     ACL request with an error.
func defaultMM2Props(o MM2Options) map[string]string {
	src, dst := o.SourceAlias, o.TargetAlias
	return map[string]string{
		"clusters":                                    src + ", " + dst,
		src + ".bootstrap.servers":                    o.SourceAddr,
		dst + ".bootstrap.servers":                    o.TargetAddr,
		src + "->" + dst + ".enabled":                 "true",
		src + "->" + dst + ".topics":                  o.Topics,
		dst + "->" + src + ".enabled":                 "false",
		dst + "->" + src + ".emit.heartbeats.enabled": "false",
		"plugin.discovery":                            "service_load",
		dst + ".plugin.discovery":                     "service_load",
		"replication.factor":                          "1",
		"checkpoints.topic.replication.factor":        "1",
		"heartbeats.topic.replication.factor":         "1",
		"offset-syncs.topic.replication.factor":       "1",
		"offset.storage.replication.factor":           "1",
		"status.storage.replication.factor":           "1",
		"config.storage.replication.factor":           "1",
		"sync.topic.acls.enabled":                     "false",
		"refresh.topics.interval.seconds":             "10",
		"refresh.groups.interval.seconds":             "10",
	}
}

// StartMirrorMaker writes mm2.properties and starts
// org.apache.kafka.connect.mirror.MirrorMaker. It returns as soon as the JVM
// runs: MM2 has no readiness signal of its own, so callers wait for
// replicated data to appear on the target (typically 15-40 s on 2 cores).
// ctx is only used while starting; the process runs until Stop or Kill.
func StartMirrorMaker(ctx context.Context, opts MM2Options) (*MirrorMaker, error) {
	if opts.SourceAddr == "" || opts.TargetAddr == "" {
		return nil, fmt.Errorf("start mirrormaker: SourceAddr and TargetAddr are required")
	}
	if opts.SourceAlias == "" {
		opts.SourceAlias = "source"
	}
	if opts.TargetAlias == "" {
		opts.TargetAlias = "target"
	}
	if opts.Topics == "" {
		opts.Topics = ".*"
	}
	if opts.Heap == "" {
		opts.Heap = "1g"
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start mirrormaker: %w", err)
	}
	libs, err := Libs()
	if err != nil {
		return nil, fmt.Errorf("start mirrormaker: %w", err)
	}
	m := &MirrorMaker{opts: opts, libs: libs}
	if err := m.launch(); err != nil {
		if m.ownDir {
			os.RemoveAll(m.opts.Dir)
		}
		return nil, fmt.Errorf("start mirrormaker: %w", err)
	}
	return m, nil
}

func (m *MirrorMaker) launch() error {
	if m.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "ferry-mm2-")
		if err != nil {
			return err
		}
		m.opts.Dir, m.ownDir = dir, true
	} else if err := os.MkdirAll(m.opts.Dir, 0o755); err != nil {
		return err
	}
	m.logPath = filepath.Join(m.opts.Dir, "mm2.log")
	props := defaultMM2Props(m.opts)
	maps.Copy(props, m.opts.Props)
	propsPath := filepath.Join(m.opts.Dir, "mm2.properties")
	if err := writeProps(propsPath, "Written by loadtest/kafkabroker", props); err != nil {
		return err
	}
	args := javaArgs(m.libs, m.opts.Heap, m.opts.JVMArgs, "org.apache.kafka.connect.mirror.MirrorMaker", propsPath)
	p, err := procgroup.Start("java", args, m.logPath)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// PID is the process id of the MM2 JVM; the benchmark reads /proc/PID.
func (m *MirrorMaker) PID() int { return m.proc.PID() }

// LogPath is the file receiving MM2's stdout and stderr.
func (m *MirrorMaker) LogPath() string { return m.logPath }

// Running reports whether the MM2 process is alive.
func (m *MirrorMaker) Running() bool { return !m.proc.Exited() }

// ExitError describes why MM2 ended, with the end of its log, or returns nil
// while it runs. Useful when replicated data never shows up.
func (m *MirrorMaker) ExitError() error {
	if !m.proc.Exited() {
		return nil
	}
	return exitError(m.proc, m.logPath)
}

// Stop shuts MM2 down (SIGTERM, then SIGKILL after 30 s) and removes its
// directory if StartMirrorMaker created it. Calling it again is a no-op.
func (m *MirrorMaker) Stop() error {
	err := m.proc.Stop(mm2StopTimeout)
	if m.ownDir {
		if rmErr := os.RemoveAll(m.opts.Dir); rmErr != nil && err == nil {
			err = rmErr
		}
		// A Restart makes a new temporary directory rather than one that
		// nothing would remove.
		m.opts.Dir, m.ownDir = "", false
	}
	if err != nil {
		return fmt.Errorf("stop mirrormaker: %w", err)
	}
	return nil
}

// Kill ends MM2 at once with SIGKILL. Its directory is kept; call Stop
// afterwards to remove a temporary one.
func (m *MirrorMaker) Kill() { m.proc.Kill() }

// Pause freezes MM2 with SIGSTOP (every JVM thread stopped when it returns),
// as a long GC pause or a frozen VM would; Resume undoes it.
func (m *MirrorMaker) Pause() error { return m.proc.Pause() }

// Resume continues a paused MM2 with SIGCONT.
func (m *MirrorMaker) Resume() error { return m.proc.Resume() }

// Restart starts MM2 again, with the same properties, once it has ended
// (Kill, Stop or a crash); its log continues in the same file (in a new
// directory if Stop removed a temporary one). It resumes
// from the source offsets it committed to the target cluster and, like
// StartMirrorMaker, returns as soon as the JVM runs.
func (m *MirrorMaker) Restart() error {
	if !m.proc.Exited() {
		return errors.New("restart mirrormaker: still running")
	}
	if err := m.launch(); err != nil {
		return fmt.Errorf("restart mirrormaker: %w", err)
	}
	return nil
}

// MM2TunedProps are MM2 settings sized like Ferry's defaults, so a
// comparison with Ferry sets like against like: tasks tasks (one per source
// partition, say), lz4 and 1 MiB batches on the target producer (Ferry's
// writer and link.batch.max_bytes) lingering 20 ms (the removed
// link.batch.linger's default, kept so that runs compare), 1 MiB per
// partition per fetch on the source consumer
// (link.fetch_max_bytes). source and target are the cluster aliases.
func MM2TunedProps(source, target string, tasks int) map[string]string {
	return map[string]string{
		"tasks.max":                                    strconv.Itoa(tasks),
		target + ".producer.compression.type":          "lz4",
		target + ".producer.batch.size":                "1048576",
		target + ".producer.linger.ms":                 "20",
		target + ".producer.max.request.size":          "4194304",
		target + ".producer.buffer.memory":             "67108864",
		source + ".consumer.max.partition.fetch.bytes": "1048576",
		source + ".consumer.fetch.max.bytes":           "67108864",
	}
}

// MM2ExactlyOnceProps are MM2TunedProps with exactly-once delivery: the
// target's Connect worker runs exactly-once source tasks (transactional
// producers, the source offsets committed in the same transactions as the
// records), and the source consumer reads committed records only.
// MirrorSourceConnector declares exactly-once support only with
// read_committed (otherwise it answers UNSUPPORTED, which the connector's
// default exactly.once.support=requested lets pass): it would copy the
// records of aborted source transactions, and commit them on the target.
func MM2ExactlyOnceProps(source, target string, tasks int) map[string]string {
	p := MM2TunedProps(source, target, tasks)
	p[target+".exactly.once.source.support"] = "enabled"
	p[source+".consumer.isolation.level"] = "read_committed"
	return p
}
