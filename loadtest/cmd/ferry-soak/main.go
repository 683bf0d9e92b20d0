// Command ferry-soak runs the fault soak (package soak) once and prints its
// summary and the row for docs/reliability.md's soak table; with -out it
// also appends the report, as one JSON line, to that file. It exits 1 when
// the run breaks the delivery's promise. `make soak` runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/soak"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-soak:", err)
		os.Exit(1)
	}
}

func run() error {
	minutes := flag.Float64("minutes", 5, "minutes of faults (after a 20 s warm-up)")
	seed := flag.Uint64("seed", 0, "schedule seed; 0 picks one (printed)")
	delivery := flag.String("delivery", "exactly_once", "exactly_once or at_least_once")
	codec := flag.String("codec", "", "link.codec (empty: Ferry's default)")
	bin := flag.String("bin", "bin", "folder with ferry-fetcher and ferry-writer")
	rate := flag.Int("rate", 800, "records per second of the idempotent producer (the transactional one writes a quarter)")
	work := flag.String("work", "", "working folder (default: a new one in the temporary folder, kept when the run fails)")
	out := flag.String("out", "", "append the report as a JSON line to this file")
	flag.Parse()
	if *seed == 0 {
		*seed = rand.Uint64N(1 << 32)
	}
	if *delivery != "exactly_once" && *delivery != "at_least_once" {
		return fmt.Errorf("-delivery %q: want exactly_once or at_least_once", *delivery)
	}
	dir := *work
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", fmt.Sprintf("ferry-soak-%d-", *seed)); err != nil {
			return err
		}
	}
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("soak", "seed", *seed, "minutes", *minutes, "delivery", *delivery, "codec", *codec, "folder", dir)
	rep, err := soak.Run(ctx, soak.Options{
		Duration: time.Duration(*minutes * float64(time.Minute)),
		Seed:     *seed, Delivery: *delivery, Codec: *codec,
		Dir: dir, BinDir: absBin, Rate: *rate, Log: log,
	})
	if err != nil {
		return fmt.Errorf("seed %d (folder %s): %w", *seed, dir, err)
	}
	fmt.Print(rep.Summary())
	fmt.Println(soak.RowHeader)
	fmt.Println(rep.Row())
	if *out != "" {
		line, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(append(line, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if !rep.OK() {
		return errors.New("the run broke the delivery's promise; folder " + dir + " kept")
	}
	if *work == "" {
		os.RemoveAll(dir)
	}
	return nil
}
