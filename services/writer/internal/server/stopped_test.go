package server

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/services/writer/internal/topicfilter"
)

// A partition the writer refuses for good (here a record above
// producer.max_message_bytes) is stopped at its fetcher; the writer's
// status lists it with the refusal's reason and words, so an operator of
// the target side sees it too, until a stream opens the partition again.
func TestRefusedPartitionIsListedAsStopped(t *testing.T) {
	w := startWriterWith(t, []Link{{Name: "east", Topics: mustFilter(t, topicfilter.DefaultInclude, topicfilter.DefaultExclude)}},
		func(c *ProducerSettings) { c.MaxMessageBytes, c.Compression = 100_000, recordbatch.None })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := w.openOrders(ctx, t, "east")
	codecs, err := batch.NewCodecs(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()
	var enc batch.Encoder
	enc.Append(41, time.Now().UnixMilli(), []byte("big"), bytes.Repeat([]byte("x"), 150_000), nil)
	if _, err := sendWire(t, stream, 1, codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)); err == nil {
		t.Fatal("the record above producer.max_message_bytes was acknowledged")
	}
	var got []StoppedPartition
	for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = w.srv.Stopped()
	}
	if len(got) != 1 || got[0].Link != "east" || got[0].Topic != "orders" || got[0].Partition != 0 ||
		got[0].Reason != "record_too_large" || !strings.Contains(got[0].Error, "offset 41") {
		t.Fatalf("stopped partitions %+v, want east orders/0 record_too_large naming offset 41", got)
	}
	w.openOrders(ctx, t, "east")
	if got := w.srv.Stopped(); len(got) != 0 {
		t.Fatalf("stopped partitions %+v after a stream opened orders/0 again, want none", got)
	}
}
