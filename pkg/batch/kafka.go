package batch

import (
	"errors"
	"fmt"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// A batch of format PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2 carries the
// source's own Kafka record batches (the proto says what may be in it).
// SealKafka and OpenKafka keep its rules in one place for both tiers.

// KafkaBatch is one Kafka record batch of an opened wire batch.
type KafkaBatch struct {
	Raw  []byte
	Info recordbatch.Info
}

// LastOffset is the offset of the batch's last record.
func (k KafkaBatch) LastOffset() int64 { return k.Info.BaseOffset + int64(k.Info.LastOffsetDelta) }

// SealKafka makes a wire batch of the given Kafka record batches of one
// partition (complete, in offset order), copying from first. raw is the
// batches concatenated, as fetched; it is compressed with codec only if
// none of them is compressed already, since compressing compressed bytes
// again costs CPU and saves nothing.
func (c *Codecs) SealKafka(raw []byte, batches []KafkaBatch, first int64, codec ferryv1.Codec) *ferryv1.Batch {
	count := 0
	compressed := false
	for _, k := range batches {
		count += int(k.Info.NumRecords)
		compressed = compressed || k.Info.Compression() != recordbatch.None
	}
	payload, used := raw, ferryv1.Codec_CODEC_NONE
	if !compressed {
		payload, used = c.compress(codec, raw)
	}
	return &ferryv1.Batch{
		FirstOffset:      first,
		LastOffset:       batches[len(batches)-1].LastOffset(),
		RecordCount:      uint32(count),
		Codec:            used,
		Format:           ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2,
		Payload:          payload,
		Crc32C:           Checksum(payload),
		UncompressedSize: uint32(len(raw)),
	}
}

// Skip makes the wire batch saying that source offsets first..last of a
// partition hold nothing to copy: Kafka batches a Ferry writer produced
// into the source cluster, left out so that no record goes back to the
// cluster it came from (active-active links). It has no records and an
// empty payload; the writer checkpoints past it, only when the range ends
// below the source's high watermark hw, which the fetch saw.
func Skip(first, last, hw int64) *ferryv1.Batch {
	return &ferryv1.Batch{
		FirstOffset: first, LastOffset: last, SourceHighWatermark: hw, Codec: ferryv1.Codec_CODEC_NONE,
		Format: ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2, Crc32C: Checksum(nil),
	}
}

// OpenKafka checks a wire batch of Kafka record batches whole and returns
// them: the payload's checksum and declared size, each Kafka batch's own
// CRC-32C (so a batch damaged anywhere since the source broker wrote it is
// refused), magic v2, no control batch, offsets that follow the proto's
// rules and the declared first and last offsets and record count. The
// batches alias the payload when it is not compressed (a producer may then
// rewrite their headers in place: the payload is not read again). A Skip
// opens to no batches.
func (c *Codecs) OpenKafka(b *ferryv1.Batch, maxSize int) ([]KafkaBatch, error) {
	if b.GetFormat() != ferryv1.PayloadFormat_PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2 {
		return nil, fmt.Errorf("%w: payload format %v, want Kafka record batches", ErrMalformed, b.GetFormat())
	}
	data, err := c.payload(b, maxSize)
	if err != nil {
		return nil, err
	}
	if b.GetRecordCount() == 0 { // a Skip
		if len(data) != 0 {
			return nil, fmt.Errorf("%w: %d payload bytes in a batch of no records", ErrMalformed, len(data))
		}
		return nil, nil
	}
	raws, partial, err := recordbatch.Split(data)
	if err == nil && partial > 0 {
		err = fmt.Errorf("%d bytes after the last complete Kafka batch", partial)
	}
	if err == nil && len(raws) == 0 {
		err = errors.New("no Kafka batch")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	out := make([]KafkaBatch, len(raws))
	count := 0
	for i, raw := range raws {
		info, err := recordbatch.Parse(raw)
		if err == nil {
			err = recordbatch.CheckCRC(raw)
		}
		if err != nil {
			if errors.Is(err, recordbatch.ErrCRC) {
				return nil, fmt.Errorf("%w: Kafka batch %d: %v", ErrChecksum, i, err)
			}
			return nil, fmt.Errorf("%w: Kafka batch %d: %v", ErrMalformed, i, err)
		}
		k := KafkaBatch{Raw: raw, Info: info}
		switch {
		case info.Control():
			err = errors.New("a control batch")
		case info.LastOffsetDelta < 0 || info.NumRecords < 1:
			err = fmt.Errorf("%d records, last offset delta %d", info.NumRecords, info.LastOffsetDelta)
		case i == 0 && (info.BaseOffset > b.GetFirstOffset() || k.LastOffset() < b.GetFirstOffset()):
			err = fmt.Errorf("offsets %d..%d do not hold the first offset %d", info.BaseOffset, k.LastOffset(), b.GetFirstOffset())
		case i > 0 && info.BaseOffset <= out[i-1].LastOffset():
			err = fmt.Errorf("starts at %d, not after the previous batch's end %d", info.BaseOffset, out[i-1].LastOffset())
		}
		if err != nil {
			return nil, fmt.Errorf("%w: Kafka batch %d: %v", ErrMalformed, i, err)
		}
		out[i] = k
		count += int(info.NumRecords)
	}
	if last := out[len(out)-1].LastOffset(); last != b.GetLastOffset() {
		return nil, fmt.Errorf("%w: last Kafka batch ends at %d, batch says %d", ErrMalformed, last, b.GetLastOffset())
	}
	if count != int(b.GetRecordCount()) {
		return nil, fmt.Errorf("%w: %d records in the Kafka batches, batch says %d", ErrMalformed, count, b.GetRecordCount())
	}
	return out, nil
}
