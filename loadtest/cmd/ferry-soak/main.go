// Command ferry-soak runs the fault soak (package soak) once, against Ferry
// or (-system mm2-eos) MirrorMaker 2 exactly-once, and prints its summary
// and the row for docs/reliability.md's soak table; with -out it also
// appends the report, as one JSON line, to that file. It exits 1 when the
// run breaks the delivery's promise: for mm2-eos that is a finding about
// MM2, reported like Ferry's. `make soak` runs it.
package main

import (
	"bytes"
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
	system := flag.String("system", soak.SystemFerry, "what copies: "+soak.SystemFerry+", "+soak.SystemFerryActiveActive+" (Ferry with the link back, active-active), "+soak.SystemFerryDR+" (Ferry, then the source region lost and failed over with ferryctl) or "+soak.SystemMM2EOS+" (MirrorMaker 2 exactly-once)")
	minutes := flag.Float64("minutes", 5, "minutes of faults (after a 20 s warm-up)")
	seed := flag.Uint64("seed", 0, "schedule seed; 0 picks one (printed)")
	delivery := flag.String("delivery", "exactly_once", "exactly_once or at_least_once")
	codec := flag.String("codec", "", "link.codec (empty: Ferry's default); Ferry only")
	bin := flag.String("bin", "bin", "folder with ferry-fetcher and ferry-writer; Ferry only")
	rate := flag.Int("rate", 800, "records per second of the idempotent producer (the transactional one writes a quarter)")
	work := flag.String("work", "", "working folder (default: a new one in the temporary folder, kept when the run fails)")
	out := flag.String("out", "", "append the report as a JSON line to this file")
	commit := flag.String("commit", "", "the Ferry build tested (git describe), recorded in the report")
	maxRecovery := flag.Duration("max-recovery", 60*time.Second, "fail the run when the longest recovery after a fault exceeds this (0: report it only)")
	regionLoss := flag.String("region-loss", "", soak.SystemFerryDR+" only: how the source region is lost, "+soak.LossKill+" (default: its broker, fetchers and Consul killed) or "+soak.LossPartition+" (cut off from the target region, everything running: the writers' streams still open at the failover)")
	table := flag.String("table", "", "run nothing: print the soak table of the reports in this file (written by -out)")
	flag.Parse()
	if *table != "" {
		return printTable(*table)
	}
	if *seed == 0 {
		*seed = rand.Uint64N(1 << 32)
	}
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	opts := soak.Options{
		System:   *system,
		Duration: time.Duration(*minutes * float64(time.Minute)),
		Seed:     *seed, Delivery: *delivery, Codec: *codec,
		BinDir: absBin, Rate: *rate, RecoveryBound: *maxRecovery, RegionLoss: *regionLoss,
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	dir := *work
	if dir == "" {
		if dir, err = os.MkdirTemp("", fmt.Sprintf("ferry-soak-%s-%d-", *system, *seed)); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("soak", "system", *system, "seed", *seed, "minutes", *minutes, "delivery", *delivery, "codec", *codec, "folder", dir)
	opts.Dir, opts.Log = dir, log
	rep, err := soak.Run(ctx, opts)
	if err != nil {
		return fmt.Errorf("seed %d (folder %s): %w", *seed, dir, err)
	}
	rep.Commit = *commit
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
		if rep.System == soak.SystemMM2EOS {
			return errors.New("MirrorMaker 2 broke exactly-once under these faults (a finding about MM2, not the harness); folder " + dir + " kept")
		}
		return errors.New("the run broke the delivery's promise; folder " + dir + " kept")
	}
	if *work == "" {
		os.RemoveAll(dir)
	}
	return nil
}

// printTable prints the table of docs/reliability.md from reports, one
// JSON line each.
func printTable(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Println(soak.RowHeader)
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var rep soak.Report
		if err := json.Unmarshal(line, &rep); err != nil {
			return fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		if rep.System == "" { // reports from before systems
			rep.System = soak.SystemFerry
		}
		fmt.Println(rep.Row())
	}
	return nil
}
