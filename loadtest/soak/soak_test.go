package soak

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/harness"
)

// TestSoak runs the fault soak for SOAK_MINUTES (default 2) with seed
// SOAK_SEED (default 1) and delivery SOAK_DELIVERY (default exactly_once),
// link codec SOAK_CODEC (default Ferry's); `make soak` runs longer ones.
// The run's folder is kept when it fails.
func TestSoak(t *testing.T) {
	minutes, err := envFloat("SOAK_MINUTES", 2)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := strconv.ParseUint(envOr("SOAK_SEED", "1"), 10, 64)
	if err != nil {
		t.Fatalf("SOAK_SEED: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := harness.Build(bctx, bin, raceEnabled); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(os.TempDir(), "ferry-test-artifacts", fmt.Sprintf("soak-%d-%d", seed, time.Now().Unix()))
	opts := Options{
		Duration: time.Duration(minutes * float64(time.Minute)),
		Seed:     seed,
		Delivery: envOr("SOAK_DELIVERY", "exactly_once"),
		Codec:    os.Getenv("SOAK_CODEC"),
		Dir:      work,
		BinDir:   bin,
		Rate:     400,
		Log:      slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("soak (folder %s): %v", work, err)
	}
	t.Log("\n" + rep.Summary())
	if !rep.OK() {
		t.Fatalf("soak seed %d failed; folder %s kept:\n%s", seed, work, rep.Row())
	}
	if rep.faults() < int(minutes*3) {
		t.Fatalf("only %d faults acted in %.1f minutes (%d skipped)", rep.faults(), minutes, rep.Skipped)
	}
	os.RemoveAll(work)
}

func TestScheduleIsSeededAndKeepsResourcesApart(t *testing.T) {
	a, b := Schedule(7, 10*time.Minute), Schedule(7, 10*time.Minute)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if slices.Equal(a, Schedule(8, 10*time.Minute)) {
		t.Fatal("two seeds gave the same schedule")
	}
	seen := map[string]bool{}
	for seed := range uint64(20) {
		s := Schedule(seed, 5*time.Minute)
		if len(s) < 15 {
			t.Fatalf("seed %d: %d faults in 5 minutes", seed, len(s))
		}
		overlapping := false
		for i, f := range s {
			seen[f.Kind] = true
			for _, g := range s[:i] {
				k := kindOf(g.Kind)
				if g.At+g.For+k.settle > f.At {
					overlapping = true
					for _, r := range resources(f) {
						if slices.Contains(resources(g), r) {
							t.Fatalf("seed %d: %+v and %+v share %s", seed, g, f, r)
						}
					}
				}
			}
		}
		if !overlapping {
			t.Errorf("seed %d: no two faults overlap", seed)
		}
	}
	for _, k := range kinds {
		if !seen[k.name] {
			t.Errorf("no seed of 20 drew %s", k.name)
		}
	}
}

func kindOf(name string) kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	panic(name)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envFloat(k string, def float64) (float64, error) {
	v := os.Getenv(k)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of minutes", k, v)
	}
	return f, nil
}

// testWriter sends the soak's log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
