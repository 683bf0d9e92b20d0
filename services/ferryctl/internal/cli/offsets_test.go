package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// sourceBatch is an uncompressed Kafka batch as a source broker stores
// it: records "v<offset>" at base plus each delta (gaps are what
// compaction or an aborted transaction left).
func sourceBatch(base int64, deltas ...int32) []byte {
	now := time.Now().UnixMilli()
	var recs []byte
	for i, d := range deltas {
		r := kmsg.Record{OffsetDelta: d, TimestampDelta64: int64(i), Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", base+int64(d))}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb := kmsg.RecordBatch{
		FirstOffset: base, Magic: 2, LastOffsetDelta: deltas[len(deltas)-1], FirstTimestamp: now, MaxTimestamp: now + int64(len(deltas)),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(deltas)), Records: recs,
	}
	rb.Length = int32(recordbatch.HeaderSize - 12 + len(recs))
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// copyOrders copies source orders/0 through the first writer, as a
// fetcher of shard 1 would, in three rounds (each its own transaction, so
// markers on the target between them): the source's log starts at 50;
// 55..59 are an aborted transaction and its marker, not copied;
// compaction left 60, 62 and 63 of 60..64; then 65..69.
func (tg target) copyOrders(ctx context.Context, t *testing.T) {
	t.Helper()
	stream, codecs := tg.openOrders(ctx, t)
	for i, round := range []struct {
		first int64
		raw   []byte
	}{{50, sourceBatch(50, 0, 1, 2, 3, 4)}, {60, sourceBatch(60, 0, 2, 3)}, {65, sourceBatch(65, 0, 1, 2, 3, 4)}} {
		info, err := recordbatch.Parse(round.raw)
		if err != nil {
			t.Fatal(err)
		}
		b := codecs.SealKafka(round.raw, []batch.KafkaBatch{{Raw: round.raw, Info: info}}, round.first, ferryv1.Codec_CODEC_NONE)
		b.Sequence, b.Epoch, b.Topic, b.Partition = uint64(i+1), 1, "orders", 0
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: b}}); err != nil {
			t.Fatal(err)
		}
		for acked := false; !acked; {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("round %d: stream ended: %v", i+1, err)
			}
			acked = resp.GetAck().GetSequence() == b.Sequence
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return // the fetcher is gone
		}
	}
}

// targetOf reads east.orders/0 read_committed from the target and returns
// each copied source offset's target offset (from the record's value).
func targetOf(ctx context.Context, t *testing.T, seeds []string) map[int64]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"east.orders": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int64]int64{}
	for len(out) < 13 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read east.orders/0: %v (read %v)", ctx.Err(), out)
		}
		fs.EachRecord(func(r *kgo.Record) {
			s, err := strconv.ParseInt(strings.TrimPrefix(string(r.Value), "v"), 10, 64)
			if err != nil {
				t.Fatalf("east.orders/0 at %d holds %q", r.Offset, r.Value)
			}
			out[s] = r.Offset
		})
	}
	return out
}

// ferryctl offsets translate against real writers, with the fetcher gone:
// both directions exactly as the target shows, through either writer;
// beyond_copied exits 0 and says so; before_index and no_index exit 1;
// --group prints the target offsets and the source offsets they stand
// for; -o json, --help and usage errors.
func TestOffsetsTranslate(t *testing.T) {
	tg := startTarget(t)
	seeds := tg.seeds
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg.copyOrders(ctx, t)
	copied := targetOf(ctx, t, seeds)

	translate := func(args ...string) (int, Translation, string) {
		t.Helper()
		code, out, errOut := tg.run(t, "ferryctl", append([]string{"offsets", "translate", "--link", "east", "-o", "json"}, args...)...)
		var tr Translation
		if code != exitUsage {
			if err := json.Unmarshal([]byte(out), &tr); err != nil {
				t.Fatalf("offsets translate %v -o json: %v\n%s%s", args, err, out, errOut)
			}
		}
		return code, tr, errOut
	}
	// Source 55..59 were not copied: a consumer at 55 reads 60 next.
	for _, tc := range []struct {
		offset, want int64
		reverse      bool
	}{{50, copied[50], false}, {55, copied[60], false}, {61, copied[62], false}, {69, copied[69], false},
		{copied[54] + 1, 60, true}, {copied[62], 62, true}, {copied[69], 69, true}} {
		code, tr, errOut := translate("--topic", "orders", "--partition", "0", "--offset", strconv.FormatInt(tc.offset, 10), "--reverse="+strconv.FormatBool(tc.reverse))
		if code != exitOK || tr.Outcome != "exact" || tr.Translated == nil || *tr.Translated != tc.want || tr.TargetTopic != "east.orders" {
			t.Errorf("translate %d (reverse %v) exited %d: %+v %s; want exact %d", tc.offset, tc.reverse, code, tr, errOut, tc.want)
		}
	}
	code, tr, _ := translate("--topic", "orders", "--partition", "0", "--offset", "1000")
	if code != exitOK || tr.Outcome != "beyond_copied" || *tr.Translated != copied[69]+1 {
		t.Errorf("translate beyond the copy exited %d: %+v; want beyond_copied at %d", code, tr, copied[69]+1)
	}
	code, tr, errOut := translate("--topic", "orders", "--partition", "0", "--offset", "10")
	if code != exitFailed || tr.Outcome != "before_index" || tr.IndexStart == nil || *tr.IndexStart != 50 || !strings.Contains(errOut, "before the offset index") {
		t.Errorf("translate before the index exited %d: %+v %s; want before_index starting at 50", code, tr, errOut)
	}
	code, tr, errOut = translate("--topic", "payments", "--partition", "0", "--offset", "0")
	if code != exitFailed || tr.Outcome != "no_index" || !strings.Contains(errOut, "no offset index") {
		t.Errorf("translate of a partition never copied exited %d: %+v %s; want no_index", code, tr, errOut)
	}

	// Through the other writer, as text.
	tg.writers = tg.writers[1:]
	code, out, errOut := tg.run(t, "ferryctl", "offsets", "translate", "--link", "east", "--topic", "orders", "--partition", "0", "--offset", "55")
	if want := fmt.Sprintf("east.orders/0 offset %d", copied[60]); code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "exact") {
		t.Errorf("translate as text exited %d: %q %s; want %q", code, out, errOut, want)
	}

	commitOnTarget(ctx, t, seeds, "app", copied[62], groupsync.Marker(61))
	code, out, errOut = tg.run(t, "ferryctl", "offsets", "translate", "--link", "east", "--group", "app", "-o", "json")
	var g GroupTranslationReport
	if err := json.Unmarshal([]byte(out), &g); code != exitOK || err != nil || len(g.Partitions) != 1 {
		t.Fatalf("translate --group exited %d: %s %s (%v)", code, out, errOut, err)
	}
	if p := g.Partitions[0]; p.Topic != "orders" || p.TargetTopic != "east.orders" || p.TargetOffset != copied[62] || !p.Ferry ||
		p.SourceOffset == nil || *p.SourceOffset != 61 || p.Outcome != "exact" {
		t.Errorf("group app: %+v; want east.orders/0 at %d standing for source 61 (Ferry's)", p, copied[62])
	}
	if code, out, errOut = tg.run(t, "ferryctl", "offsets", "translate", "--link", "east", "--group", "absent"); code != exitFailed || !strings.Contains(errOut, "no committed offset") {
		t.Errorf("translate --group of a group with no offsets exited %d: %s %s", code, out, errOut)
	}

	if code, _, errOut = tg.run(t, "fetcher", "offsets", "translate", "--link", "east", "--group", "app"); code != exitFailed || !strings.Contains(errOut, "PermissionDenied") {
		t.Errorf("translate as the fetcher exited %d: %s", code, errOut)
	}
	for _, args := range [][]string{
		{"--topic", "orders", "--partition", "0", "--offset", "1"},                            // no --link
		{"--link", "east", "--topic", "orders", "--partition", "0"},                           // no --offset
		{"--link", "east", "--group", "app", "--topic", "orders"},                             // both forms
		{"--link", "east", "--group", "app", "--reverse"},                                     // --reverse without an offset
		{"--link", "east", "--topic", "orders", "--partition", "0", "--offset", "1", "extra"}, // an argument
	} {
		if code, _, _ := tg.run(t, "ferryctl", append([]string{"offsets", "translate"}, args...)...); code != exitUsage {
			t.Errorf("offsets translate %v exited %d, want %d", args, code, exitUsage)
		}
	}
	var outB, errB bytes.Buffer
	if code := Run([]string{"offsets", "translate", "--help"}, &outB, &errB); code != exitOK || !strings.Contains(errB.String(), "Usage: ferryctl offsets translate") {
		t.Errorf("offsets translate --help exited %d: %s", code, errB.String())
	}
	if code := Run([]string{"offsets"}, &outB, &errB); code != exitUsage {
		t.Errorf("offsets without translate exited %d, want %d", code, exitUsage)
	}
	errB.Reset()
	if Run([]string{"--help"}, &outB, &errB); !strings.Contains(errB.String(), "offsets") {
		t.Errorf("ferryctl --help does not list offsets: %s", errB.String())
	}
}

// commitOnTarget commits group's offset on east.orders/0 with metadata.
func commitOnTarget(ctx context.Context, t *testing.T, seeds []string, group string, offset int64, metadata string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "east.orders", Partition: 0, At: offset, LeaderEpoch: -1, Metadata: metadata})
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit group %s: %v", group, err)
	}
}
