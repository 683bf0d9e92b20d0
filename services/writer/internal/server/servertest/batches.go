package servertest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// Transactional is a source batch's transactional attribute.
const Transactional = 0x10

// SourceBatch is a Kafka batch as a source broker stores it: records
// "v<offset>" at base with the given offset deltas (consecutive when nil),
// compressed with c, with optional extra attributes (LogAppendTime).
func SourceBatch(t *testing.T, base int64, n int, deltas []int32, c recordbatch.Compression, attrs int16) []byte {
	t.Helper()
	if deltas == nil {
		for i := range n {
			deltas = append(deltas, int32(i))
		}
	}
	now := time.Now().UnixMilli()
	var recs []byte
	for i, d := range deltas {
		r := kmsg.Record{OffsetDelta: d, TimestampDelta64: int64(i), Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", base+int64(d))}
		recs = AppendRecord(recs, &r)
	}
	rb := kmsg.RecordBatch{
		FirstOffset: base, PartitionLeaderEpoch: 3, Magic: 2, Attributes: int16(c) | attrs,
		LastOffsetDelta: deltas[len(deltas)-1], FirstTimestamp: now, MaxTimestamp: now + int64(len(deltas)),
		ProducerID: 77, ProducerEpoch: 1, FirstSequence: 500, NumRecords: int32(len(deltas)),
	}
	if c != recordbatch.None {
		// The records section compressed by the package's own codec: a
		// Build of the same records has it after its header.
		built := buildSameRecords(t, deltas, base, c)
		rb.Records = built[recordbatch.HeaderSize:]
	} else {
		rb.Records = recs
	}
	rb.Length = int32(recordbatch.HeaderSize - 12 + len(rb.Records)) // what follows the length field
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// AppendRecord appends r with its length, which kmsg takes as given: the
// length counts what follows the length varint.
func AppendRecord(dst []byte, r *kmsg.Record) []byte {
	r.Length = 0
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(dst)
}

// buildSameRecords compresses records like SourceBatch's with Build; only
// consecutive deltas can be built this way.
func buildSameRecords(t *testing.T, deltas []int32, base int64, c recordbatch.Compression) []byte {
	t.Helper()
	now := time.Now().UnixMilli()
	var recs []recordbatch.Record
	for i, d := range deltas {
		if d != int32(i) {
			t.Fatal("compressed source batches with gaps are not built by this helper")
		}
		recs = append(recs, recordbatch.Record{Timestamp: now + int64(i), Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", base+int64(d))})
	}
	raw, err := recordbatch.Build(nil, recs, c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// WireKafka seals Kafka batches into one wire batch copying from first.
func WireKafka(t *testing.T, first int64, raws ...[]byte) *ferryv1.Batch {
	t.Helper()
	return WireKafkaCodec(t, first, ferryv1.Codec_CODEC_NONE, raws...)
}

// WireKafkaCodec is WireKafka with the wire payload compressed with codec
// (as the fetcher compresses batches of uncompressed Kafka batches).
func WireKafkaCodec(t *testing.T, first int64, codec ferryv1.Codec, raws ...[]byte) *ferryv1.Batch {
	t.Helper()
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()
	var kbs []batch.KafkaBatch
	var payload []byte
	for _, raw := range raws {
		info, err := recordbatch.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		kbs = append(kbs, batch.KafkaBatch{Raw: raw, Info: info})
		payload = append(payload, raw...)
	}
	return codecs.SealKafka(payload, kbs, first, codec)
}

// CopyWithGaps copies orders/0's source offsets 0..29: a committed
// transaction 0..4 and its marker 5, an aborted one 6..9 and its marker
// 10 (neither copied), 11..15 plain, compaction's survivors 16, 18, 19
// and 23, and 24..29, in three rounds (exactly-once: a marker on the
// target between each).
func CopyWithGaps(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient) {
	t.Helper()
	MustSend(t, stream, 1, 0, 0, SourceBatch(t, 0, 5, nil, recordbatch.None, Transactional), SourceBatch(t, 11, 5, nil, recordbatch.LZ4, 0))
	MustSend(t, stream, 2, 0, 16, SourceBatch(t, 16, 0, []int32{0, 2, 3, 7}, recordbatch.None, 0))
	MustSend(t, stream, 3, 0, 24, SourceBatch(t, 24, 6, nil, recordbatch.None, 0))
}
