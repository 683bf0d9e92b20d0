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

// commandTimeout bounds a whole checkpoint command: reading the
// checkpoint topic, writing and reading back what it writes.
const commandTimeout = 2 * time.Minute

const checkpointUsage = `usage:
  ferry-writer checkpoint forget --config FILE --link LINK --topic TOPIC --partition N
      forget the partition's checkpoint: it starts from its fetchers' start_from
  ferry-writer checkpoint set --config FILE --link LINK --topic TOPIC --partition N --next-offset O
      move the partition's checkpoint forward to source offset O (past a record)
  ferry-writer checkpoint sign --config FILE
      sign again, with this writer's certificate, every checkpoint it takes that
      it did not sign with it (unsigned ones under checkpoints.accept_unsigned,
      ones signed with a certificate since replaced)
Each writes records signed with the writer's key (tls), which every writer
verifies (checkpoints.signers); records anyone else writes are ignored.`

// CheckpointCommand runs `ferry-writer checkpoint forget|set|sign` and
// returns the exit code: 0, 1 when the command failed, 2 for bad
// arguments or configuration.
func CheckpointCommand(args, env []string, stderr io.Writer) int {
	return checkpointCommand(args, env, stderr, telemetry.BridgeSarama)
}

// checkpointCommand is CheckpointCommand; bridge hands sarama's
// process-wide logger to log (tests, whose other sarama clients run
// meanwhile, leave it alone).
func checkpointCommand(args, env []string, stderr io.Writer, bridge func(*slog.Logger)) int {
	if len(args) == 0 || !slices.Contains([]string{"forget", "set", "sign"}, args[0]) {
		fmt.Fprintln(stderr, checkpointUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("ferry-writer checkpoint "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the writer's YAML configuration file (its target, checkpoints and tls settings)")
	link := fs.String("link", "", "the link's name")
	topic := fs.String("topic", "", "the source topic")
	partition := fs.Int("partition", -1, "the source partition")
	next := fs.Int64("next-offset", -1, "set: the next source offset to copy")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	onePartition := *link != "" && *topic != "" && *partition >= 0
	if fs.NArg() > 0 || (verb == "sign") == onePartition || verb == "sign" && *link != "" || (verb == "set") != (*next >= 0) {
		fmt.Fprintln(stderr, checkpointUsage)
		return 2
	}
	cfg := config.Defaults()
	if err := pkgconfig.Load(&cfg, *path, env, "FERRY_WRITER_", nil); err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint %s: %v\n", verb, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint %s: %v\n", verb, err)
		return 2
	}
	if onePartition && !slices.ContainsFunc(cfg.Links, func(l config.Link) bool { return l.Name == *link }) {
		fmt.Fprintf(stderr, "ferry-writer checkpoint %s: link %q is not in the configuration's links\n", verb, *link)
		return 2
	}
	log, err := telemetry.NewLogger(cfg.Logging(), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ferry-writer checkpoint %s: %v\n", verb, err)
		return 2
	}
	bridge(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	k := checkpoint.Key{Link: *link, Topic: *topic, Partition: int32(*partition)}
	err = withStore(ctx, &cfg, log, func(store *checkpoint.Store) error {
		switch verb {
		case "forget":
			cp, err := store.Forget(ctx, k)
			if err == nil {
				fmt.Fprintf(stderr, "forgot the checkpoint of %s (next source offset %d, target offset %d, written by %s at %s): "+
					"the partition starts from its fetchers' start_from at its next open\n",
					k, cp.NextSourceOffset, cp.TargetOffset, cp.Writer, cp.Time.Format(time.RFC3339))
			}
			return err
		case "set":
			return setCheckpoint(ctx, store, k, *next, cfg.ID, stderr)
		}
		return signAll(ctx, store, stderr)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (bound %v)", err, commandTimeout)
	}
	if err != nil {
		log.Error("checkpoint "+verb+" failed", "err", err)
		return 1
	}
	return 0
}

// withStore runs f on a checkpoint store built as the writer builds its
// own from cfg, signing with the writer's key.
func withStore(ctx context.Context, cfg *config.Config, log *slog.Logger, f func(*checkpoint.Store) error) error {
	var certs *tlsconfig.Source
	if !cfg.TLS.Insecure {
		var err error
		if certs, err = tlsconfig.NewSource(cfg.TLS, log.With("component", "tls")); err != nil {
			return err
		}
	}
	signer, verifier, err := checkpointTrust(cfg, certs, log)
	if err != nil {
		return err
	}
	base, err := cfg.Target.Sarama()
	if err != nil {
		return err
	}
	store, err := checkpoint.Open(cfg.Target.BootstrapServers, base, checkpoint.Options{
		Topic: cfg.Checkpoints.Topic, Partitions: cfg.Checkpoints.Partitions,
		ReplicationFactor: cfg.Checkpoints.ReplicationFactor, Writer: cfg.ID + "-command",
		Signer: signer, Verifier: verifier, AcceptUnsigned: cfg.Checkpoints.AcceptUnsigned,
		MaxUnverifiedBytes: int64(cfg.Checkpoints.MaxUnverifiedBytes),
	}, log.With("component", "checkpoints"))
	if err != nil {
		return err
	}
	defer store.Close()
	return f(store)
}

// setCheckpoint moves k's checkpoint to next, keeping what else its
// checkpoint says.
func setCheckpoint(ctx context.Context, store *checkpoint.Store, k checkpoint.Key, next int64, writer string, out io.Writer) error {
	cur, ok, err := store.Move(ctx, k, next, writer+" (checkpoint set)")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "set the checkpoint of %s to next source offset %d (was %d, found %v)\n", k, next, cur.NextSourceOffset, ok)
	return nil
}

// signAll signs again every checkpoint the store takes that this writer
// did not sign with its current certificate. A shard committing
// meanwhile is harmless: its newer checkpoint wins, and the copy is
// ignored as a replay.
func signAll(ctx context.Context, store *checkpoint.Store, out io.Writer) error {
	if err := store.Sync(ctx); err != nil {
		return err
	}
	keys, err := store.NotSignedByMe()
	if err != nil {
		return err
	}
	signed := 0
	for _, k := range keys {
		cp, ok, err := store.Get(k)
		if err != nil || !ok {
			continue // changed since: nothing to sign
		}
		if err := store.Put(ctx, k, cp); err != nil {
			fmt.Fprintf(out, "%s: %v\n", k, err)
			continue
		}
		signed++
	}
	fmt.Fprintf(out, "signed %d of %d checkpoints not signed with this writer's certificate\n", signed, len(keys))
	if signed < len(keys) {
		return fmt.Errorf("%d checkpoints not signed", len(keys)-signed)
	}
	return nil
}
