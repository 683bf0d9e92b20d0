package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/inprocess"
)

// produceTxn writes n records to topic's partition p in one transaction
// of cl (transactional), committed or aborted.
func produceTxn(t *testing.T, cl *kgo.Client, topic string, p int32, prefix string, n int, commit bool) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// checkpointsOf reads the checkpoint topic of the writers on c and
// returns link's checkpoints as they stand: "topic/partition" to the next
// source offset.
func checkpointsOf(t *testing.T, c *kfake.Cluster, link string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "__ferry_checkpoints"
	ends, err := kadm.NewClient(kclient(t, c)).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	cl := kclient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	out := map[string]int64{}
	for read := int64(0); read < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("checkpoint topic read up to %d of %d", read, end.Offset)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read = r.Offset + 1
			key, ok := strings.CutPrefix(string(r.Key), link+"/")
			if !ok {
				return
			}
			if r.Value == nil {
				delete(out, key)
				return
			}
			var cp struct {
				Next int64 `json:"next_source_offset"`
			}
			if err := json.Unmarshal(r.Value, &cp); err != nil {
				t.Fatalf("checkpoint %s: %v", r.Key, err)
			}
			out[key] = cp.Next
		})
	}
	return out
}

// Failback sets up the reverse link B→A (west, served by a writer of A
// that has never run it): with --reverse-link, each partition's
// checkpoint of west is set at TARGET_START, where B's own writes began
// (none for a partition of which nothing was copied: west's start_from
// applies); a dry run sets nothing; a second run is refused, naming a
// partition that has a checkpoint, and a refused call writes nothing. The
// report counts each stranded tail's records read_committed: a committed
// transaction's records count, an aborted one's and the markers do not;
// above --count-limit offsets a tail is not counted, and says so.
func TestFailbackSetsTheReverseStartAndCountsTheTail(t *testing.T) {
	r := startReplication(t)
	src := kclient(t, r.source)
	produce(t, src, 0, 40)
	r.waitStatus(t, "orders copied", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 40 && l.Partitions[1].Committed == 40
	})
	r.fetcher.Stop()
	// The stranded tail: 5 records on orders/0 and 1, then on orders/0 a
	// committed transaction of 3 and an aborted one of 4 (14 offsets, 8
	// records); orders/2, of which nothing was copied, 5.
	produce(t, src, 1, 5)
	txn := kclient(t, r.source, kgo.TransactionalID("tail"))
	produceTxn(t, txn, "orders", 0, "committed", 3, true)
	produceTxn(t, txn, "orders", 0, "aborted", 4, false)
	produceTo(t, src, "orders", 2, "p2", 5)
	if code, _, errOut := r.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes", "--reason", "region A lost"); code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	tgt := kclient(t, r.cluster)
	produceTo(t, tgt, "east.orders", 0, "B0", 10)
	produceTo(t, tgt, "east.orders", 1, "B1", 10)
	end0 := copiedEnd(values(t, r.cluster, "east.orders", 0, 50), "p0-b0-")
	end1 := copiedEnd(values(t, r.cluster, "east.orders", 1, 50), "p1-b0-")
	rev := inprocess.Start(t, inprocess.Options{ID: "a1", Target: r.source.ListenAddrs(), CertDir: r.dir, Links: []string{"west"},
		ControlIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")}})
	cfg := sourceConfig(t, "east", r.source.ListenAddrs())
	reverse := []string{"--source-config", cfg, "--reverse-link", "west", "--reverse-writer", rev.Addr}

	dry, _ := failbackJSON(t, r, exitOK, append(reverse, "--dry-run")...)
	for i, want := range []struct{ offsets, records int64 }{{14, 8}, {5, 5}, {5, 5}} {
		p := dry.Partitions[i]
		if p.StrandedOffsets != want.offsets || p.StrandedRecords == nil || *p.StrandedRecords != want.records {
			t.Errorf("orders/%d: stranded %d offsets, %v records (%s), want %d offsets, %d records", i, p.StrandedOffsets, p.StrandedRecords, p.Uncounted, want.offsets, want.records)
		}
	}
	if cps := checkpointsOf(t, r.source, "west"); len(cps) != 0 {
		t.Fatalf("failback --dry-run set west's checkpoints %v", cps)
	}
	// A tail not counted leaves the report short of the loss in records:
	// partial (exit 4), naming it.
	limited, errOut := failbackJSON(t, r, exitPartial, append(reverse, "--dry-run", "--count-limit", "10")...)
	if p := limited.Partitions[0]; p.StrandedRecords != nil || !strings.Contains(p.Uncounted, "--count-limit") || !strings.Contains(errOut, "orders/0 (14 offsets, above --count-limit 10)") {
		t.Errorf("orders/0 of 14 offsets under --count-limit 10: %v records (%q), want not counted, saying why; said %q", p.StrandedRecords, p.Uncounted, errOut)
	}

	// The reverse link's writer out of reach: the checkpoints move, its
	// start is not set: partial.
	unreached := []string{"--source-config", cfg, "--reverse-link", "west", "--reverse-writer", "127.0.0.1:1"}
	part, errOut := failbackJSON(t, r, exitPartial, unreached...)
	if part.Writer == "" || part.ReverseWriter != "" || !strings.Contains(errOut, "the start of reverse link west was not set") {
		t.Errorf("failback with the reverse writer unreachable: checkpoints by %q, reverse by %q: %s", part.Writer, part.ReverseWriter, errOut)
	}
	for i, end := range []int64{54, 45, 5} {
		if p := part.Partitions[i]; p.Checkpoint == nil || *p.Checkpoint != end || p.ReverseCheckpoint != nil {
			t.Errorf("orders/%d: east's checkpoint reported at %v, want A's end %d; reverse checkpoint %v, want none", i, p.Checkpoint, end, p.ReverseCheckpoint)
		}
	}
	rep, _ := failbackJSON(t, r, exitOK, reverse...)
	want := map[string]int64{"east.orders/0": end0, "east.orders/1": end1}
	if cps := checkpointsOf(t, r.source, "west"); fmt.Sprint(cps) != fmt.Sprint(want) {
		t.Errorf("west's checkpoints on A are %v, want %v (TARGET_START; none for orders/2)", cps, want)
	}
	if rep.ReverseLink != "west" || rep.ReverseWriter != "a1" {
		t.Errorf("report names reverse link %q by writer %q, want west by a1", rep.ReverseLink, rep.ReverseWriter)
	}
	for i, w := range []int64{end0, end1, -1} {
		got := rep.Partitions[i].ReverseCheckpoint
		if (w < 0) != (got == nil) || got != nil && *got != w {
			t.Errorf("orders/%d: reverse checkpoint reported %v, want %d (-1: none)", i, got, w)
		}
	}

	// Again: west has checkpoints now (as a running link would): refused,
	// naming the partition, after east's are set (again) at A's end:
	// partial.
	code, out, errOut := r.run(t, "ferryctl", append([]string{"failback", "east"}, reverse...)...)
	if code != exitPartial || !strings.Contains(errOut, "east.orders/0") || !strings.Contains(errOut, "has a checkpoint") {
		t.Errorf("a second failback exited %d: %s%s", code, out, errOut)
	}
	// A refused call writes nothing, not even the partitions without one.
	var c conn
	c.writers, c.ids = multi{rev.Addr}, multi{"spiffe://ferry.local/ferry/writer"}
	c.cert, c.key, c.ca = filepath.Join(r.dir, "ferryctl.pem"), filepath.Join(r.dir, "ferryctl-key.pem"), filepath.Join(r.dir, "ca.pem")
	c.output = "text"
	cl, err := c.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	_, err = cl.writers[0].ctl.SetCheckpoints(context.Background(), &ferryv1.SetCheckpointsRequest{Link: "west", Checkpoints: []*ferryv1.CheckpointPosition{
		{Topic: "east.orders", Partition: 2, NextSourceOffset: 3}, {Topic: "east.orders", Partition: 1, NextSourceOffset: end1 + 5}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "east.orders/1") {
		t.Errorf("SetCheckpoints with east.orders/1 set answered %v, want FailedPrecondition naming it", err)
	}
	if cps := checkpointsOf(t, r.source, "west"); fmt.Sprint(cps) != fmt.Sprint(want) {
		t.Errorf("a refused SetCheckpoints changed west's checkpoints to %v, want %v", cps, want)
	}
}
