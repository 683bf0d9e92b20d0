// Package readiness decides whether the writer can do its work: the target
// cluster answers and the checkpoint view is healthy. One answer feeds both
// the admin /readyz endpoint (polled by the Consul check and Kubernetes'
// readiness probe) and the gRPC health service, so the two never disagree.
//
// The target is probed by one goroutine on a fixed interval and the result
// cached; Ready only reads it. A checker polling every second must not add
// a Kafka round trip per poll, nor hang on a broker that stopped answering.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Options configure a Checker.
type Options struct {
	// Addrs and Sarama reach the target cluster; the probe builds its own
	// client from them, with its own short timeouts.
	Addrs  []string
	Sarama *sarama.Config
	// Topic is the one topic the probe's metadata request asks for: the
	// checkpoint topic, which the writer cannot work without. Asking for
	// none would make sarama ask for every topic of the cluster.
	Topic string
	// View reports why the checkpoint view failed; nil while it is healthy.
	View func() error
	// Health is set SERVING or NOT_SERVING for each of Services whenever
	// readiness changes.
	Health   *health.Server
	Services []string
	// Interval between probes; Timeout bounds one.
	Interval time.Duration
	Timeout  time.Duration
	// TargetFailures is how many probes of the target in a row must fail
	// before a ready writer says it is not (0 or 1: the first). A target
	// that answers slowly for a while is slow for every writer of the
	// region alike: taking them all out of the catalog at once only moves
	// shards between them, and each move re-opens streams across the same
	// slow hop (the region-loss soak saw heartbeats stop for seconds so).
	// A failed checkpoint view is not damped: only a restart mends it.
	TargetFailures int
	Log            *slog.Logger
}

// Checker holds the writer's readiness, refreshed by Run.
type Checker struct {
	opts   Options
	client sarama.Client
	target string // the bootstrap servers, for messages

	mu      sync.Mutex
	err     error
	checked bool
	// failures counts the target probes failed in a row (Run's goroutine
	// only).
	failures int
}

var errNotChecked = errors.New("readiness not checked yet")

// New builds a checker, not ready until Run's first check passes. It
// connects to nothing yet: the probe client dials on its first request.
func New(opts Options) (*Checker, error) {
	cfg := *opts.Sarama
	// No background refresh, no retries, no whole-cluster fetch: a probe is
	// one metadata request for one topic, bounded by Timeout, and a
	// failure is reported as is until the next probe.
	cfg.Metadata.Full = false
	cfg.Metadata.RefreshFrequency = 0
	cfg.Metadata.Retry.Max = 0
	cfg.Metadata.Timeout = opts.Timeout
	cfg.Net.DialTimeout = opts.Timeout
	cfg.Net.ReadTimeout = opts.Timeout
	cfg.Net.WriteTimeout = opts.Timeout
	client, err := sarama.NewClient(opts.Addrs, &cfg)
	if err != nil {
		return nil, fmt.Errorf("readiness probe client: %w", err)
	}
	c := &Checker{opts: opts, client: client, target: strings.Join(opts.Addrs, ","), err: errNotChecked}
	for _, s := range opts.Services {
		opts.Health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return c, nil
}

// Ready returns why the writer is not ready, nil when it is.
func (c *Checker) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close releases the probe client, after Run has returned.
func (c *Checker) Close() error { return c.client.Close() }

// Run checks readiness at once and then every Interval until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	for {
		c.set(c.check())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// check reports everything that is wrong, not only the first thing. A
// failed target probe counts only from the TargetFailures-th in a row on
// while the writer is ready; a writer not ready yet (or again) needs a
// probe that passes.
func (c *Checker) check() error {
	var errs []error
	if err := c.opts.View(); err != nil {
		errs = append(errs, fmt.Errorf("checkpoint view failed: %w", err))
	}
	if err := c.probe(); err == nil {
		c.failures = 0
	} else {
		c.failures++
		if c.failures >= c.opts.TargetFailures || c.Ready() != nil {
			errs = append(errs, err)
		} else {
			c.opts.Log.Debug("target probe failed; still ready", "failures", c.failures, "of", c.opts.TargetFailures, "err", err)
		}
	}
	return errors.Join(errs...)
}

// probe asks the target for the checkpoint topic's metadata.
func (c *Checker) probe() error {
	err := c.client.RefreshMetadata(c.opts.Topic)
	if err == nil {
		return nil
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		// The cluster answered, but not with a usable checkpoint topic.
		return fmt.Errorf("target cluster %s: checkpoint topic %s: %w", c.target, c.opts.Topic, err)
	}
	return fmt.Errorf("target cluster %s unreachable: %w", c.target, err)
}

// set records the result and, when readiness changed, tells the gRPC
// health service and the log. A changed reason alone is not logged again:
// /readyz shows the current one.
func (c *Checker) set(err error) {
	c.mu.Lock()
	changed := !c.checked || (err == nil) != (c.err == nil)
	c.err, c.checked = err, true
	c.mu.Unlock()
	if !changed {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
		c.opts.Log.Warn("writer not ready", "err", err)
	} else {
		c.opts.Log.Info("writer ready")
	}
	for _, s := range c.opts.Services {
		c.opts.Health.SetServingStatus(s, st)
	}
}
