package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	pkgconfig "github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/telemetry"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
)

// forgetTimeout bounds the whole forget: reading the checkpoint topic,
// writing the tombstone and reading it back.
const forgetTimeout = 2 * time.Minute

// CheckpointCommand runs `ferry-writer checkpoint forget`: it writes a
// tombstone for one partition's checkpoint, signed with the writer's own
// key (an unsigned one is ignored by every writer), so the partition
// starts from its fetchers' start_from at its next open. It returns the
// exit code: 0, 1 when the forget failed, 2 for bad arguments.
func CheckpointCommand(args, env []string, stderr io.Writer) int {
	const usage = "usage: ferry-writer checkpoint forget --config FILE --link LINK --topic TOPIC --partition N"
	if len(args) == 0 || args[0] != "forget" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("ferry-writer checkpoint forget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the writer's YAML configuration file (its target, checkpoints and tls settings)")
	link := fs.String("link", "", "the link's name")
	topic := fs.String("topic", "", "the source topic")
	partition := fs.Int("partition", -1, "the source partition")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *link == "" || *topic == "" || *partition < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cfg := config.Defaults()
	if err := pkgconfig.Load(&cfg, *path, env, "FERRY_WRITER_", nil); err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint forget: %v\n", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint forget: %v\n", err)
		return 2
	}
	if !slices.ContainsFunc(cfg.Links, func(l config.Link) bool { return l.Name == *link }) {
		fmt.Fprintf(stderr, "ferry-writer checkpoint forget: link %q is not in the configuration's links\n", *link)
		return 2
	}
	log, err := telemetry.NewLogger(cfg.Logging(), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint forget: %v\n", err)
		return 2
	}
	telemetry.BridgeSarama(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, forgetTimeout)
	defer cancel()
	k := checkpoint.Key{Link: *link, Topic: *topic, Partition: int32(*partition)}
	cp, err := Forget(ctx, &cfg, k, log)
	if err != nil {
		log.Error("checkpoint forget failed", "key", k.String(), "err", err)
		return 1
	}
	fmt.Fprintf(stderr, "forgot the checkpoint of %s (next source offset %d, target offset %d, written by %s at %s): "+
		"the partition starts from its fetchers' start_from at its next open\n",
		k, cp.NextSourceOffset, cp.TargetOffset, cp.Writer, cp.Time.Format(time.RFC3339))
	return 0
}

// Forget writes the signed tombstone of k's checkpoint with the writer's
// settings cfg, and returns the checkpoint it forgot once the writer's
// view of the topic has taken it.
func Forget(ctx context.Context, cfg *config.Config, k checkpoint.Key, log *slog.Logger) (checkpoint.Checkpoint, error) {
	var certs *tlsconfig.Source
	if !cfg.TLS.Insecure {
		var err error
		if certs, err = tlsconfig.NewSource(cfg.TLS, log.With("component", "tls")); err != nil {
			return checkpoint.Checkpoint{}, err
		}
	}
	signer, verifier, err := checkpointTrust(cfg, certs, log)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	base, err := cfg.Target.Sarama()
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	store, err := checkpoint.Open(cfg.Target.BootstrapServers, base, checkpoint.Options{
		Topic: cfg.Checkpoints.Topic, Partitions: cfg.Checkpoints.Partitions,
		ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Writer: cfg.ID + "-forget",
		Signer: signer, Verifier: verifier, AcceptUnsigned: cfg.Checkpoints.AcceptUnsigned,
	}, log.With("component", "checkpoints"))
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	defer store.Close()
	cp, err := store.Forget(ctx, k)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (bound %v)", err, forgetTimeout)
	}
	return cp, err
}
