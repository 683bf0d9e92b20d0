package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/workload"
)

// restartMidStream produces at a steady rate while the chosen process is
// stopped (SIGTERM, or SIGKILL when kill is set) and started again twice,
// then checks that nothing is lost or reordered.
func restartMidStream(t *testing.T, which string, kill bool) {
	restartMidStreamIn(t, "at_least_once", which, kill, 2)
}

func restartMidStreamIn(t *testing.T, delivery, which string, kill bool, times int) {
	ctx := context.Background()
	e := newEnv(t)
	e.delivery = delivery
	e.createTopic("t.live", 4, nil)
	e.startWriter()
	e.startFetcher(nil)
	const records = 6000
	prodDone := make(chan *workload.Producer, 1)
	go func() {
		prodDone <- e.produce(ctx, workload.Options{Topic: "t.live", Partitions: 4, Records: records, ValueBytes: 200, Rate: 1000, Seed: 9})
	}()
	proc := map[string]*harness.Process{"writer": e.writer, "fetcher": e.fetcher}[which]
	admin := map[string]string{"writer": e.writerAdmin, "fetcher": e.fetcherAdmin}[which]
	for i := range times {
		// The process must be up before it is stopped again: a stop that
		// comes first tests nothing (seen: the second stop came before the
		// restarted race-detector binary had started).
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := harness.WaitHealthy(hctx, admin)
		cancel()
		if err != nil {
			t.Fatalf("%s not up: %v", which, err)
		}
		e.waitFor(ctx, "src.t.live", int64(records*(i+1)/(times+2)))
		if kill {
			proc.Kill()
		} else if err := proc.Stop(30 * time.Second); err != nil {
			t.Fatalf("graceful stop of %s: %v", which, err)
		}
		if err := proc.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	<-prodDone
	e.waitFor(ctx, "src.t.live", records)
	res := e.verify(ctx, "t.live")
	recordScenario(t, delivery, res, 0)
	if res.Missing != 0 || res.Reordered != 0 || res.Corrupt != 0 || res.Produced != records {
		t.Fatalf("after restarting the %s: %+v", which, res)
	}
	// A graceful stop drains and commits: nothing is sent twice. A kill may
	// duplicate what was produced but not yet checkpointed, in at-least-once
	// mode only: exactly-once commits records and checkpoints together.
	if (!kill || delivery == "exactly_once") && res.Duplicates != 0 {
		t.Fatalf("graceful restarts of the %s duplicated %d records", which, res.Duplicates)
	}
}

func TestFetcherGracefulRestartMidStream(t *testing.T) { restartMidStream(t, "fetcher", false) }
func TestFetcherKilledMidStream(t *testing.T)          { restartMidStream(t, "fetcher", true) }
func TestWriterGracefulRestartMidStream(t *testing.T)  { restartMidStream(t, "writer", false) }
func TestWriterKilledMidStream(t *testing.T)           { restartMidStream(t, "writer", true) }

// In exactly-once mode a writer killed at any point mid-transaction leaves
// neither duplicates nor loss: its open transaction is aborted when the
// next producer of the shard is created, and the checkpoints committed with
// the records say where to resume.
func TestExactlyOnceWriterKilledMidStream(t *testing.T) {
	restartMidStreamIn(t, "exactly_once", "writer", true, scenarioKills())
}
func TestExactlyOnceFetcherKilledMidStream(t *testing.T) {
	restartMidStreamIn(t, "exactly_once", "fetcher", true, 3)
}

// pauseMidStream freezes a process (SIGSTOP) for a few seconds while records
// flow, as a long GC pause or a frozen VM would, then lets it go on.
func pauseMidStream(t *testing.T, which string) {
	ctx := context.Background()
	e := newEnv(t)
	e.createTopic("t.live", 4, nil)
	e.startWriter()
	e.startFetcher(nil)
	const records = 4000
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		e.produce(ctx, workload.Options{Topic: "t.live", Partitions: 4, Records: records, ValueBytes: 200, Rate: 1000, Seed: 11})
	}()
	proc := map[string]*harness.Process{"writer": e.writer, "fetcher": e.fetcher}[which]
	e.waitFor(ctx, "src.t.live", 1000)
	if err := proc.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the fault itself: frozen this long, as a long GC pause
	if err := proc.Resume(); err != nil {
		t.Fatal(err)
	}
	<-prodDone
	e.waitFor(ctx, "src.t.live", records)
	res := e.verify(ctx, "t.live")
	recordScenario(t, "", res, 0)
	if !res.OK() || res.Produced != records {
		t.Fatalf("after pausing the %s: %+v", which, res)
	}
}

func TestWriterPausedMidStream(t *testing.T)  { pauseMidStream(t, "writer") }
func TestFetcherPausedMidStream(t *testing.T) { pauseMidStream(t, "fetcher") }
