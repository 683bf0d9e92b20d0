package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// FuzzOpenKafka feeds OpenKafka what a fetcher sends a writer: a wire batch
// of Kafka record batches, every field chosen by the fuzzer. reseal
// recomputes the inner batches' CRCs of an uncompressed payload, so that
// mutations reach the checks after them. What OpenKafka accepts must be
// exactly what the wire batch declares; what it refuses, it refuses with
// an error the writer maps to a status.
func FuzzOpenKafka(f *testing.F) {
	const maxSize = 1 << 20
	c, err := NewCodecs(maxSize)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	a, b := kafkaBatch(f, 100, 10, recordbatch.None), kafkaBatch(f, 110, 5, recordbatch.LZ4)
	z := kafkaBatch(f, 200, 20, recordbatch.Zstd)
	add := func(w *ferryv1.Batch) {
		f.Add(w.Payload, uint32(w.Codec), w.RecordCount, w.UncompressedSize, w.FirstOffset, w.LastOffset, false)
	}
	for _, codec := range allCodecs {
		add(c.SealKafka(concat(a, a), []KafkaBatch{a}, 104, codec)) // concat(a, a): overlapping
		add(c.SealKafka(concat(a, b), []KafkaBatch{a, b}, 100, codec))
	}
	add(c.SealKafka(concat(z), []KafkaBatch{z}, 219, ferryv1.Codec_CODEC_NONE))
	add(Skip(7, 9, 10))
	f.Fuzz(func(t *testing.T, payload []byte, codec, count, size uint32, first, last int64, reseal bool) {
		if reseal && ferryv1.Codec(codec) == ferryv1.Codec_CODEC_NONE {
			payload = resealAll(payload)
		}
		w := &ferryv1.Batch{
			FirstOffset: first, LastOffset: last, RecordCount: count, Codec: ferryv1.Codec(codec),
			Format: ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2, Payload: payload,
			Crc32C: Checksum(payload), UncompressedSize: size,
		}
		out, err := c.OpenKafka(w, maxSize)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("OpenKafka = %v: not an error the writer maps to a status", err)
			}
			return
		}
		if count == 0 {
			if out != nil || size != 0 {
				t.Fatalf("a Skip opened to %d batches of %d bytes", len(out), size)
			}
			return
		}
		checkOpened(t, w, out)
	})
}

// checkOpened: the batches OpenKafka returns are sound Kafka batches that
// tile the payload, ascending, holding the first offset, ending at the
// last, and counting the records the wire batch declares.
func checkOpened(t *testing.T, w *ferryv1.Batch, out []KafkaBatch) {
	if len(out) == 0 {
		t.Fatal("OpenKafka accepted a batch of records with no Kafka batch")
	}
	if out[0].Info.BaseOffset > w.FirstOffset || out[0].LastOffset() < w.FirstOffset || out[len(out)-1].LastOffset() != w.LastOffset {
		t.Fatalf("Kafka batches %d..%d for a wire batch of %d..%d",
			out[0].Info.BaseOffset, out[len(out)-1].LastOffset(), w.FirstOffset, w.LastOffset)
	}
	records, size := 0, 0
	for i, k := range out {
		if err := recordbatch.CheckCRC(k.Raw); err != nil || k.Info.Control() || k.Info.Size() != len(k.Raw) || k.Info.NumRecords < 1 {
			t.Fatalf("Kafka batch %d: %+v of %d bytes (%v)", i, k.Info, len(k.Raw), err)
		}
		if i > 0 && k.Info.BaseOffset <= out[i-1].LastOffset() {
			t.Fatalf("Kafka batch %d starts at %d, the one before ends at %d", i, k.Info.BaseOffset, out[i-1].LastOffset())
		}
		if w.Codec == ferryv1.Codec_CODEC_NONE && !bytes.Equal(k.Raw, w.Payload[size:size+len(k.Raw)]) {
			t.Fatalf("Kafka batch %d is not the payload's bytes at %d", i, size)
		}
		records += int(k.Info.NumRecords)
		size += len(k.Raw)
	}
	if records != int(w.RecordCount) || size != int(w.UncompressedSize) {
		t.Fatalf("%d records in %d bytes, the wire batch declares %d in %d", records, size, w.RecordCount, w.UncompressedSize)
	}
}

// resealAll returns payload with the CRC of every batch Split finds in it
// recomputed.
func resealAll(payload []byte) []byte {
	payload = bytes.Clone(payload)
	batches, _, err := recordbatch.Split(payload)
	if err != nil {
		return payload
	}
	for _, b := range batches {
		binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	}
	return payload
}
