package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/credentials/insecure"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/refusal"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
)

// certSet is one development CA's writer and fetcher certificates, as
// Sources.
type certSet struct{ writer, fetcher *tlsconfig.Source }

func newCertSet(t *testing.T) certSet {
	t.Helper()
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	src := func(tier, peer string) *tlsconfig.Source {
		s, err := tlsconfig.NewSource(tlsconfig.Config{
			CertFile: filepath.Join(dir, tier+".pem"), KeyFile: filepath.Join(dir, tier+"-key.pem"),
			CAFile: filepath.Join(dir, "ca.pem"), AllowedIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, peer)},
		}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return certSet{writer: src("writer", "fetcher"), fetcher: src("fetcher", "writer")}
}

// signingWriter starts a writer that signs its checkpoints and verifies
// them as the writer's app wires it by default: its own certificate's
// identity, under its own CA.
func signingWriter(t *testing.T, certs certSet, acceptUnsigned bool) *testWriter {
	t.Helper()
	v, err := tlsconfig.NewVerifier(certs.writer, "", certs.writer.OwnIdentities())
	if err != nil {
		t.Fatal(err)
	}
	return startWriterOn(t, nil, passthroughLinks(t, false), func(*Options) {}, func(o *checkpoint.Options) {
		o.Signer, o.Verifier, o.AcceptUnsigned = certs.writer, v, acceptUnsigned
	}, nil, insecure.NewCredentials())
}

var orders0 = checkpoint.Key{Link: "east", Topic: "orders", Partition: 0}

// forgedCheckpoint is a checkpoint of orders/0 at next, signed by signer
// (nil: unsigned).
func forgedCheckpoint(t *testing.T, next int64, signer checkpoint.Signer) *kgo.Record {
	t.Helper()
	value, _ := json.Marshal(checkpoint.Checkpoint{NextSourceOffset: next, TargetOffset: next, Writer: "mallory"})
	rec := &kgo.Record{Key: []byte(orders0.String()), Value: value}
	if signer != nil {
		sig, err := signer.Sign("ferry-checkpoint", rec.Key, rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range sig.Headers() {
			rec.Headers = append(rec.Headers, kgo.RecordHeader(h))
		}
	}
	return rec
}

// checkpointsOf reads the checkpoint topic to its end and returns the
// records of k.
func (w *testWriter) checkpointsOf(ctx context.Context, t *testing.T, k checkpoint.Key) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cluster.ListenAddrs()...), kgo.ConsumeTopics(cpTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, cpTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(cpTopic, 0)
	var out []*kgo.Record
	for read := int64(0); read < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			read = r.Offset + 1
			if string(r.Key) == k.String() {
				out = append(out, r)
			}
		})
	}
	return out
}

// copyBoth copies records [from, from+5) of orders/0 and orders/1 and
// closes the stream.
func (w *testWriter) copyBoth(ctx context.Context, t *testing.T, from int64) {
	t.Helper()
	stream := w.openTwo(ctx, t)
	for p := range int32(2) {
		if err := sendToPartition(t, stream, uint64(p)+1, p, from, sourceBatch(t, from, 5, nil, recordbatch.LZ4, 0)); err != nil {
			t.Fatalf("orders/%d: %v", p, err)
		}
	}
	closeStream(t, stream)
}

// resumeOf opens shard 1 with orders/0 and returns the position the
// writer answers for it.
func (w *testWriter) resumeOf(ctx context.Context, t *testing.T) *ferryv1.PartitionPosition {
	t.Helper()
	stream, err := w.client.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: "f1",
		Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 2}},
		Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}}}
	if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.GetOpened().GetResume()) != 1 {
		t.Fatalf("open answered %v, %v; want Opened", resp, err)
	}
	closeStream(t, stream)
	return resp.GetOpened().GetResume()[0]
}

// A checkpoint nobody the writer admits signed (unsigned, its signature
// moved from another record, another CA, a fetcher's certificate) stops
// its partition at the open, named with the record's offset in the
// checkpoint topic, instead of moving the partition's resume point; the
// shard's other partition goes on copying without it.
func TestForgedCheckpointStopsItsPartition(t *testing.T) {
	certs, other := newCertSet(t), newCertSet(t)
	for _, tc := range []struct {
		name   string
		forge  func(t *testing.T, genuine *kgo.Record) *kgo.Record
		reason string
	}{
		{"unsigned", func(t *testing.T, _ *kgo.Record) *kgo.Record { return forgedCheckpoint(t, 1000, nil) }, "not signed"},
		{"a signature moved onto another value", func(t *testing.T, genuine *kgo.Record) *kgo.Record {
			rec := forgedCheckpoint(t, 1000, nil)
			rec.Headers = genuine.Headers
			return rec
		}, "signature of"},
		{"signed under another CA", func(t *testing.T, _ *kgo.Record) *kgo.Record { return forgedCheckpoint(t, 1000, other.writer) }, "not trusted"},
		{"signed by an identity not allowed", func(t *testing.T, _ *kgo.Record) *kgo.Record { return forgedCheckpoint(t, 1000, certs.fetcher) }, "not in allowed_ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := signingWriter(t, certs, false)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			w.copyBoth(ctx, t, 0)
			genuine := w.checkpointsOf(ctx, t, orders0)
			if len(genuine) == 0 {
				t.Fatal("no checkpoint of orders/0 written")
			}
			at := w.produceCheckpoint(ctx, t, tc.forge(t, genuine[len(genuine)-1]))

			stream, err := w.client.Replicate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			open := &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: "f1",
				Topics:     []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 2}},
				Partitions: []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}}
			if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			ref, ok := refusal.From(err)
			if !ok || ref.Reason != refusal.CheckpointUnverified || ref.Topic != "orders" || ref.Partition != 0 || ref.Offset != at ||
				!strings.Contains(ref.Cause, tc.reason) {
				t.Fatalf("open answered %v, %v (%+v); want CHECKPOINT_UNVERIFIED of orders/0 at checkpoint offset %d, saying %q", resp, err, ref, at, tc.reason)
			}
			if got := w.rejected(t, "east", "checkpoint_unverified"); got != 1 {
				t.Errorf("rejected{reason=checkpoint_unverified} = %v, want 1", got)
			}

			// The fetcher stops orders/0 and opens the shard without it.
			stream = w.openPartition(ctx, t, 1)
			if err := sendToPartition(t, stream, 1, 1, 5, sourceBatch(t, 5, 5, nil, recordbatch.LZ4, 0)); err != nil {
				t.Fatalf("orders/1 without orders/0: %v", err)
			}
			if got := partitionValues(t, w, 1); len(got) != 10 {
				t.Errorf("target orders/1 holds %v, want its 10 records", got)
			}
			if got := partitionValues(t, w, 0); len(got) != 5 {
				t.Errorf("target orders/0 holds %v, want the 5 copied before the forgery", got)
			}
		})
	}
}

// What anyone able to produce to the checkpoint topic could do with
// genuine records and tombstones: an unsigned tombstone (it sent the
// partition back to start_from) and an older signed checkpoint written
// again (it moved the partition back, duplicating) are ignored; the
// writer's own signed forget forgets, and cannot be replayed later.
func TestCheckpointTombstonesAndReplays(t *testing.T) {
	certs := newCertSet(t)
	w := signingWriter(t, certs, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w.copyBoth(ctx, t, 0)
	old := w.checkpointsOf(ctx, t, orders0)
	w.copyBoth(ctx, t, 5)

	w.produceCheckpoint(ctx, t, &kgo.Record{Key: []byte(orders0.String())}) // unsigned tombstone
	if pos := w.resumeOf(ctx, t); !pos.GetHasCheckpoint() || pos.GetNextOffset() != 10 {
		t.Fatalf("after an unsigned tombstone: resume %v, want the checkpoint at 10", pos)
	}

	replay := old[len(old)-1]
	w.produceCheckpoint(ctx, t, &kgo.Record{Key: replay.Key, Value: replay.Value, Headers: replay.Headers})
	if pos := w.resumeOf(ctx, t); !pos.GetHasCheckpoint() || pos.GetNextOffset() != 10 {
		t.Fatalf("after a replayed older checkpoint: resume %v, want the checkpoint at 10", pos)
	}

	forgot, err := w.store.Forget(ctx, orders0)
	if err != nil || forgot.NextSourceOffset != 10 {
		t.Fatalf("Forget = %+v, %v; want the checkpoint at 10 forgotten", forgot, err)
	}
	if pos := w.resumeOf(ctx, t); pos.GetHasCheckpoint() {
		t.Fatalf("after a signed forget: resume %v, want none", pos)
	}
	tombstones := w.checkpointsOf(ctx, t, orders0)
	forget := tombstones[len(tombstones)-1]
	if forget.Value != nil {
		t.Fatalf("the last record of orders/0 is %q, want the forget's tombstone", forget.Value)
	}

	// Copied again from the start; the same forget written again is a
	// replay.
	stream := w.openPartition(ctx, t, 0)
	if err := sendToPartition(t, stream, 1, 0, 0, sourceBatch(t, 0, 5, nil, recordbatch.LZ4, 0)); err != nil {
		t.Fatalf("orders/0 from its start: %v", err)
	}
	closeStream(t, stream)
	w.produceCheckpoint(ctx, t, &kgo.Record{Key: forget.Key, Headers: forget.Headers})
	if pos := w.resumeOf(ctx, t); !pos.GetHasCheckpoint() || pos.GetNextOffset() != 5 {
		t.Fatalf("after a replayed forget: resume %v, want the checkpoint at 5", pos)
	}
}

// With checkpoints.accept_unsigned, a checkpoint of a writer older than
// signing resumes its partition; the partition's next commit signs it.
func TestAcceptUnsignedResumesALegacyCheckpoint(t *testing.T) {
	w := signingWriter(t, newCertSet(t), true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w.produceCheckpoint(ctx, t, forgedCheckpoint(t, 7, nil))
	if n := w.store.UnsignedLatest(); n != 1 {
		t.Fatalf("UnsignedLatest = %d, want 1", n)
	}
	stream := w.openPartition(ctx, t, 0)
	if err := sendToPartition(t, stream, 1, 0, 7, sourceBatch(t, 7, 3, nil, recordbatch.LZ4, 0)); err != nil {
		t.Fatalf("orders/0 from the legacy checkpoint: %v", err)
	}
	closeStream(t, stream)
	if err := w.store.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cp, ok, err := w.store.Get(orders0); err != nil || !ok || cp.NextSourceOffset != 10 {
		t.Fatalf("Get = %+v, %v, %v; want the checkpoint at 10", cp, ok, err)
	}
	if n := w.store.UnsignedLatest(); n != 0 {
		t.Fatalf("after the next commit UnsignedLatest = %d, want 0", n)
	}
}
