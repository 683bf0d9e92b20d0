package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// HeaderSize is the size of a v2 batch header (61).
const HeaderSize = 61

// Offsets of the header fields SetProducer and Build write in place. The CRC
// covers everything from crcStart to the end of the batch; the base offset,
// length, leader epoch and magic before it are not covered, which is why the
// broker can assign offsets without resealing a batch.
const (
	offLength        = 8
	offLeaderEpoch   = 12
	offMagic         = 16
	offCRC           = 17
	crcStart         = 21 // the attributes, first field under the CRC
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offNumRecords    = 57 // first byte after the fields SetProducer changes

	// lengthMin is the Length of a batch with no records bytes: Length
	// counts what follows the base offset and itself.
	lengthMin = HeaderSize - 12

	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
	attrDeleteHorizon = 0x40
)

// ErrTruncated reports bytes that end before the batch they begin does.
var ErrTruncated = errors.New("record batch truncated")

// ErrCRC reports a batch whose bytes do not match its CRC-32C.
var ErrCRC = errors.New("record batch CRC mismatch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Info is a batch's header, parsed.
type Info struct {
	BaseOffset           int64
	Length               int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Compression is the codec of the batch's records.
func (i Info) Compression() Compression { return Compression(i.Attributes & attrCompression) }

// LogAppendTime reports whether the broker stamped the batch (attributes
// bit 3): its records then all carry MaxTimestamp.
func (i Info) LogAppendTime() bool { return i.Attributes&attrLogAppendTime != 0 }

// Transactional reports whether the batch belongs to a transaction (bit 4).
func (i Info) Transactional() bool { return i.Attributes&attrTransactional != 0 }

// Control reports whether the batch holds a transaction marker (bit 5), which
// only brokers may write.
func (i Info) Control() bool { return i.Attributes&attrControl != 0 }

// DeleteHorizon reports the delete horizon a compacted log's cleaner set on
// the batch (attributes bit 6, KIP-534) and whether it set one.
//
// Kafka's rule (MemoryRecordsBuilder, DefaultRecordBatch): the cleaner
// rewrites a batch holding tombstones or transaction markers with the bit
// set and the horizon as its base timestamp (FirstTimestamp), and writes
// each record's timestamp delta against that base, so a record's timestamp
// is FirstTimestamp plus its delta with the bit set or not (Records reads
// it so); only FirstTimestamp is then no record's own. A cleaner removes
// the batch's tombstones once the horizon is past, so a copy must not keep
// the bit: the target would drop them at the source's horizon, maybe
// already past, instead of delete.retention.ms after its own cleaning.
func (i Info) DeleteHorizon() (int64, bool) {
	if i.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return i.FirstTimestamp, true
}

// Size is the number of bytes of the whole batch, 12 + Length.
func (i Info) Size() int { return 12 + int(i.Length) }

// Parse reads the header of the batch at the start of b, which may hold more
// after it. It fails with ErrTruncated if b ends before the header or before
// the batch does.
func Parse(b []byte) (Info, error) {
	if len(b) <= offMagic {
		return Info{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrTruncated, len(b), HeaderSize)
	}
	base := int64(binary.BigEndian.Uint64(b))
	// The magic sits at the same place in every message format, so it is
	// read first: a legacy message set is shorter than a v2 header and
	// would otherwise be reported as truncated.
	if magic := int8(b[offMagic]); magic != 2 {
		return Info{}, fmt.Errorf("batch at offset %d: magic %d, only 2 is supported", base, magic)
	}
	if len(b) < HeaderSize {
		return Info{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrTruncated, len(b), HeaderSize)
	}
	length := int32(binary.BigEndian.Uint32(b[offLength:]))
	if length < lengthMin {
		return Info{}, fmt.Errorf("batch at offset %d: length %d, below the header's %d", base, length, lengthMin)
	}
	size := 12 + int(length)
	if len(b) < size {
		return Info{}, fmt.Errorf("%w: batch at offset %d needs %d bytes, have %d", ErrTruncated, base, size, len(b))
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b[:size]); err != nil {
		return Info{}, fmt.Errorf("batch at offset %d: %w", base, err)
	}
	if rb.NumRecords < 0 {
		return Info{}, fmt.Errorf("batch at offset %d: record count %d", base, rb.NumRecords)
	}
	return Info{
		BaseOffset:           rb.FirstOffset,
		Length:               rb.Length,
		PartitionLeaderEpoch: rb.PartitionLeaderEpoch,
		Magic:                rb.Magic,
		CRC:                  uint32(rb.CRC),
		Attributes:           rb.Attributes,
		LastOffsetDelta:      rb.LastOffsetDelta,
		FirstTimestamp:       rb.FirstTimestamp,
		MaxTimestamp:         rb.MaxTimestamp,
		ProducerID:           rb.ProducerID,
		ProducerEpoch:        rb.ProducerEpoch,
		BaseSequence:         rb.FirstSequence,
		NumRecords:           rb.NumRecords,
	}, nil
}

// parseOne parses b, which must be exactly one batch: a caller handing over
// more would otherwise have only the first checked or rewritten.
func parseOne(b []byte) (Info, error) {
	info, err := Parse(b)
	if err != nil {
		return Info{}, err
	}
	if extra := len(b) - info.Size(); extra != 0 {
		return Info{}, fmt.Errorf("batch at offset %d: %d bytes follow it, want exactly one batch", info.BaseOffset, extra)
	}
	return info, nil
}

// Split cuts the concatenated batches of a fetch response's records into
// batches, each aliasing data. A trailing partial batch (Kafka may cut a
// fetch response mid-batch) is not an error: it is left out and its size
// reported in partial (0 if none). Batches of magic 0 or 1 (legacy message
// sets) are an error naming the magic and offset.
func Split(data []byte) (batches [][]byte, partial int, err error) {
	for rest := data; len(rest) > 0; {
		if len(rest) <= offMagic {
			return batches, len(rest), nil
		}
		if magic := int8(rest[offMagic]); magic != 2 {
			base := int64(binary.BigEndian.Uint64(rest))
			return nil, 0, fmt.Errorf("batch at offset %d: magic %d, legacy message sets are not supported", base, magic)
		}
		if len(rest) < HeaderSize {
			return batches, len(rest), nil
		}
		// A length too small to be a batch is damage, not a cut: Parse says so.
		if length := int32(binary.BigEndian.Uint32(rest[offLength:])); length >= lengthMin && len(rest) < 12+int(length) {
			return batches, len(rest), nil
		}
		info, err := Parse(rest)
		if err != nil {
			return nil, 0, err
		}
		size := info.Size()
		batches = append(batches, rest[:size:size])
		rest = rest[size:]
	}
	return batches, 0, nil
}

// CheckCRC verifies the CRC-32C of b, which must be exactly one batch. The
// error wraps ErrCRC and names the batch's base offset, the CRC its header
// holds and the one its bytes give.
func CheckCRC(b []byte) error {
	info, err := parseOne(b)
	if err != nil {
		return err
	}
	if got := crc32.Checksum(b[crcStart:], castagnoli); got != info.CRC {
		return crcError(info, got)
	}
	return nil
}

func crcError(info Info, got uint32) error {
	return fmt.Errorf("batch at offset %d: %w: want %08x, got %08x", info.BaseOffset, ErrCRC, info.CRC, got)
}

// SetProducer rewrites, in place, the header of the single batch b for
// producing to a target: base offset 0, partition leader epoch -1, the
// producer id and epoch, the base sequence, the transactional bit (set or
// cleared), and a new CRC. The records bytes are untouched. The old CRC is
// checked first (the error wraps ErrCRC), so a damaged batch is never
// resealed; a caller need not call CheckCRC as well.
func SetProducer(b []byte, producerID int64, epoch int16, baseSequence int32, transactional bool) error {
	info, err := parseOne(b)
	if err != nil {
		return err
	}
	if got := crc32.Checksum(b[crcStart:], castagnoli); got != info.CRC {
		return crcError(info, got)
	}
	attrs := uint16(info.Attributes) &^ attrTransactional
	if transactional {
		attrs |= attrTransactional
	}
	binary.BigEndian.PutUint64(b, 0)
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 0xffffffff)
	binary.BigEndian.PutUint16(b[crcStart:], attrs)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], castagnoli))
	return nil
}
