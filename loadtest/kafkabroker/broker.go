package kafkabroker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/ports"
	"github.com/ferry-replicator/ferry/loadtest/procgroup"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// Options configures a Broker. The zero value is a usable broker.
type Options struct {
	// Name labels the broker in errors and in server.properties.
	Name string
	// DataDir holds server.properties, kafka.log and the Kafka data (in
	// DataDir/data). Empty: a new temporary directory, removed by Stop.
	DataDir string
	// Port and ControllerPort are the 127.0.0.1 ports of the client and
	// controller listeners. Zero: a free port is picked.
	Port, ControllerPort int
	// Props are extra server properties; they override the defaults.
	Props map[string]string
	// Heap is the JVM heap, used for both -Xms and -Xmx. Default "1g".
	Heap string
	// JVMArgs are extra java arguments placed before the main class.
	JVMArgs []string
	// ProxiedPort, when set, adds a second plaintext client listener,
	// PROXIED, that advertises 127.0.0.1:ProxiedPort: a client
	// bootstrapping there is sent back there for every broker, so a proxy
	// on that port (forwarding to ProxiedAddr) carries all its traffic,
	// while Addr stays direct for the test's own clients.
	ProxiedPort int
	// TLSCA, when set, makes the client listener TLS only (SSL) and requires
	// a client certificate (ssl.client.auth=required) from this CA, the only
	// one the broker trusts. The broker's own certificate, for 127.0.0.1 and
	// localhost, is issued from it too. The controller listener stays
	// plaintext on loopback. ClientTLS gives a client configuration with a
	// certificate from the CA.
	TLSCA *devcerts.CA
}

// Broker is a running single-node Kafka cluster (KRaft, combined broker and
// controller, node id 1). Its methods are not safe for concurrent use.
type Broker struct {
	opts    Options
	libs    string
	ownDir  bool // DataDir was created by Start and is removed by Stop
	logPath string
	proc    *procgroup.Proc
	// proxiedListen is the port of the PROXIED listener (Options.ProxiedPort).
	proxiedListen int
	// clientTLS is the configuration of this package's own clients (the
	// readiness probe) with TLSCA; nil for a plaintext broker.
	clientTLS *tls.Config
}

const (
	brokerStopTimeout = 30 * time.Second
	logFileName       = "kafka.log"
	// readyPoll is how often Start asks the broker whether it is ready.
	readyPoll = 200 * time.Millisecond
)

// defaultServerProps are tuned for one node on loopback: replication factor
// 1 everywhere (including the transaction log, so transactional producers
// work), no auto-created topics, no group rebalance delay, and fewer
// partitions for the internal topics so the first group or transaction does
// not wait for 50 partitions to be created. The broker session timeout is
// 4 s instead of 9 s: after a SIGKILL the restarted controller refuses the
// new broker registration (DUPLICATE_BROKER_REGISTRATION) until the old
// session expires, so this is most of the cost of Kill+Restart. Keep in sync
// with cluster.sh.
func defaultServerProps(port, cport int, dataDir string) map[string]string {
	return map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          "1",
		"controller.quorum.voters":                         fmt.Sprintf("1@127.0.0.1:%d", cport),
		"listeners":                                        fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, cport),
		"advertised.listeners":                             fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", port),
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                         filepath.Join(dataDir, "data"),
		"num.partitions":                                   "1",
		"default.replication.factor":                       "1",
		"min.insync.replicas":                              "1",
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     "10",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "10",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		"broker.heartbeat.interval.ms":                     "1000",
		"broker.session.timeout.ms":                        "4000",
		"auto.create.topics.enable":                        "false",
	}
}

// Start writes the configuration, formats the storage on first use, starts
// the broker and returns once it answers metadata requests and lists itself
// as an available broker. ctx bounds only the start-up: if it ends first,
// the process is killed and Start fails; once Start has returned, the broker
// runs until Stop or Kill, whatever happens to ctx.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	if opts.Name == "" {
		opts.Name = "kafka"
	}
	if opts.Heap == "" {
		opts.Heap = "1g"
	}
	libs, err := Libs()
	if err != nil {
		return nil, fmt.Errorf("start broker %s: %w", opts.Name, err)
	}
	b := &Broker{opts: opts, libs: libs}
	if err := b.setup(ctx); err != nil {
		if b.ownDir {
			os.RemoveAll(b.opts.DataDir)
		}
		return nil, fmt.Errorf("start broker %s: %w", opts.Name, err)
	}
	if err := b.launch(ctx); err != nil {
		if b.ownDir {
			os.RemoveAll(b.opts.DataDir)
		}
		return nil, fmt.Errorf("start broker %s: %w", opts.Name, err)
	}
	return b, nil
}

// setup picks the directory and ports, writes server.properties and formats
// the storage unless a previous run already did.
func (b *Broker) setup(ctx context.Context) error {
	if b.opts.DataDir == "" {
		dir, err := os.MkdirTemp("", "ferry-kafka-")
		if err != nil {
			return err
		}
		b.opts.DataDir, b.ownDir = dir, true
	} else if err := os.MkdirAll(b.opts.DataDir, 0o755); err != nil {
		return err
	}
	dir, err := filepath.Abs(b.opts.DataDir)
	if err != nil {
		return err
	}
	b.opts.DataDir = dir
	b.logPath = filepath.Join(dir, logFileName)

	if b.opts.Port == 0 || b.opts.ControllerPort == 0 || (b.opts.ProxiedPort != 0 && b.proxiedListen == 0) {
		free, err := ports.Free(3, false)
		if err != nil {
			return fmt.Errorf("pick ports: %w", err)
		}
		if b.opts.Port == 0 {
			b.opts.Port = free[0]
		}
		if b.opts.ControllerPort == 0 {
			b.opts.ControllerPort = free[1]
		}
		if b.opts.ProxiedPort != 0 && b.proxiedListen == 0 {
			b.proxiedListen = free[2]
		}
	}

	props := defaultServerProps(b.opts.Port, b.opts.ControllerPort, dir)
	if b.opts.ProxiedPort != 0 {
		if b.opts.TLSCA != nil {
			return errors.New("ProxiedPort with TLSCA is not supported")
		}
		props["listeners"] += fmt.Sprintf(",PROXIED://127.0.0.1:%d", b.proxiedListen)
		props["advertised.listeners"] += fmt.Sprintf(",PROXIED://127.0.0.1:%d", b.opts.ProxiedPort)
		props["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
	}
	if b.opts.TLSCA != nil {
		tlsProps, err := b.setupTLS()
		if err != nil {
			return err
		}
		maps.Copy(props, tlsProps)
	}
	maps.Copy(props, b.opts.Props)
	if err := writeProps(b.propsPath(), "Written by loadtest/kafkabroker for "+b.opts.Name, props); err != nil {
		return err
	}
	if isFile(filepath.Join(props["log.dirs"], "meta.properties")) {
		return nil
	}
	return b.format(ctx)
}

// format initialises KRaft storage with a new cluster id. With a static
// controller.quorum.voters list no --standalone flag is needed.
func (b *Broker) format(ctx context.Context) error {
	id, err := newClusterID()
	if err != nil {
		return err
	}
	args := javaArgs(b.libs, "256m", nil, "kafka.tools.StorageTool", "format", "-t", id, "-c", b.propsPath())
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "java", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		var notRun *exec.Error // java missing: the log has nothing to add
		if errors.As(err, &notRun) {
			return fmt.Errorf("format storage: %w", err)
		}
		return fmt.Errorf("format storage: %w; end of %s:\n%s", err, b.logPath, procgroup.LogTail(b.logPath, 20))
	}
	return nil
}

// newClusterID makes a KRaft cluster id the way Kafka's Uuid.randomUuid does:
// 16 random bytes in unpadded URL-safe base64, never starting with '-' (the
// CLI would take it for a flag).
func newClusterID() (string, error) {
	for {
		var u [16]byte
		if _, err := rand.Read(u[:]); err != nil {
			return "", err
		}
		if id := base64.RawURLEncoding.EncodeToString(u[:]); id[0] != '-' {
			return id, nil
		}
	}
}

// launch starts the JVM and waits until the broker is ready.
func (b *Broker) launch(ctx context.Context) error {
	args := javaArgs(b.libs, b.opts.Heap, b.opts.JVMArgs, "kafka.Kafka", b.propsPath())
	p, err := procgroup.Start("java", args, b.logPath)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, b.Addr(), b.clientTLS, p, b.logPath); err != nil {
		p.Kill()
		return err
	}
	b.proc = p
	return nil
}

// waitReady polls the broker until a metadata response lists at least one
// broker and a controller: KRaft answers requests before the broker is
// unfenced, and a fenced broker is left out of metadata responses.
func waitReady(ctx context.Context, addr string, tc *tls.Config, p *procgroup.Proc, logPath string) error {
	opts := []kgo.Opt{kgo.SeedBrokers(addr)}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lastErr := errors.New("no answer yet")
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := adm.BrokerMetadata(attempt)
		cancel()
		switch {
		case err != nil:
			lastErr = err
		case len(m.Brokers) == 0 || m.Controller < 0:
			lastErr = fmt.Errorf("metadata lists %d brokers, controller %d", len(m.Brokers), m.Controller)
		default:
			return nil
		}
		select {
		case <-p.Done():
			return exitError(p, logPath)
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s: %w (last: %v); end of %s:\n%s",
				addr, ctx.Err(), lastErr, logPath, procgroup.LogTail(logPath, 20))
		case <-time.After(readyPoll):
		}
	}
}

func (b *Broker) propsPath() string { return filepath.Join(b.opts.DataDir, "server.properties") }

// Addr is the bootstrap address, 127.0.0.1:port.
func (b *Broker) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.opts.Port))
}

// ProxiedAddr is where the PROXIED listener listens, the upstream of the
// proxy on Options.ProxiedPort; empty without one.
func (b *Broker) ProxiedAddr() string {
	if b.proxiedListen == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.proxiedListen))
}

// ClientTLS returns a client configuration for a TLS broker (Options.TLSCA):
// the CA as the only root, and a client certificate from it. It is nil for
// a plaintext broker. Each call returns a new copy.
func (b *Broker) ClientTLS() *tls.Config {
	if b.clientTLS == nil {
		return nil
	}
	return b.clientTLS.Clone()
}

// DataDir is the directory holding server.properties, the log and the data.
func (b *Broker) DataDir() string { return b.opts.DataDir }

// LogPath is the file receiving the JVM's stdout and stderr (log4j2 writes
// WARN and above there; set FERRY_KAFKA_LOG_LEVEL=INFO for more).
func (b *Broker) LogPath() string { return b.logPath }

// PID is the process id of the broker's JVM (of the last start).
func (b *Broker) PID() int { return b.proc.PID() }

// Running reports whether the broker process is alive (it may be paused).
func (b *Broker) Running() bool { return !b.proc.Exited() }

// Stop shuts the broker down cleanly (SIGTERM, then SIGKILL after 30 s) and
// removes the data directory if Start created it. Calling it again is a no-op.
func (b *Broker) Stop() error {
	err := b.proc.Stop(brokerStopTimeout)
	if b.ownDir {
		if rmErr := os.RemoveAll(b.opts.DataDir); rmErr != nil && err == nil {
			err = rmErr
		}
		b.ownDir = false
	}
	if err != nil {
		return fmt.Errorf("stop broker %s: %w", b.opts.Name, err)
	}
	return nil
}

// Kill ends the broker at once with SIGKILL, like a crash, and keeps the
// data directory, so Restart can bring it back.
func (b *Broker) Kill() { b.proc.Kill() }

// Restart stops the broker cleanly if it is running and starts it again with
// the same ports, configuration and data, returning once it is ready. It
// also works after Kill; after Stop only if Options.DataDir was given.
func (b *Broker) Restart(ctx context.Context) error {
	if err := b.proc.Stop(brokerStopTimeout); err != nil {
		return fmt.Errorf("restart broker %s: %w", b.opts.Name, err)
	}
	if !isFile(b.propsPath()) {
		return fmt.Errorf("restart broker %s: %s is gone (stopped with a temporary data dir?)", b.opts.Name, b.propsPath())
	}
	if err := b.launch(ctx); err != nil {
		return fmt.Errorf("restart broker %s: %w", b.opts.Name, err)
	}
	return nil
}

// Pause freezes the broker with SIGSTOP: connections stay open but nothing
// is answered, like a hung machine. It returns once every JVM thread has
// stopped.
func (b *Broker) Pause() error {
	if err := b.proc.Pause(); err != nil {
		return fmt.Errorf("pause broker %s: %w", b.opts.Name, err)
	}
	return nil
}

// Resume continues a paused broker with SIGCONT.
func (b *Broker) Resume() error {
	if err := b.proc.Resume(); err != nil {
		return fmt.Errorf("resume broker %s: %w", b.opts.Name, err)
	}
	return nil
}

// String names the broker for logs.
func (b *Broker) String() string {
	return b.opts.Name + "@" + b.Addr()
}
