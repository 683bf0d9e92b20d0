package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Header is a record header. A nil Value is null, distinct from empty.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record to build into a batch, or one decoded from a batch.
type Record struct {
	OffsetDelta int32    // ignored by Build (it numbers records 0..n-1); set by Records
	Timestamp   int64    // milliseconds since the epoch
	Key, Value  []byte   // nil means null, distinct from empty
	Headers     []Header // a header Value nil means null
}

// MinRecordSize is the smallest encoded record: the length, attributes,
// timestamp delta, offset delta, key, value and header count, a byte each.
// A batch's record count times this is the least it decompresses to.
const MinRecordSize = 7

// rawBuffers hold the uncompressed records of a batch being compressed.
var rawBuffers = sync.Pool{New: func() any { return new([]byte) }}

// Build appends to dst one batch of records, compressed with c, and returns
// it. The batch is what a Java producer without idempotence writes: base
// offset 0, partition leader epoch -1, CreateTime, offset deltas 0..n-1,
// FirstTimestamp the first record's timestamp and MaxTimestamp the largest,
// timestamp deltas relative to FirstTimestamp (negative for an earlier
// record), producer id, epoch and base sequence -1, and the CRC set. It
// needs at least one record. On error dst is returned as it was.
func Build(dst []byte, records []Record, c Compression) ([]byte, error) {
	return build(dst, records, c, layout{})
}

// layout is what build takes from its caller instead of numbering records
// itself: the zero layout is Build's. FromLegacy keeps the source's
// offsets, gaps included, and its LogAppendTime stamp.
type layout struct {
	baseOffset int64
	// keepDeltas writes the records' OffsetDelta, which must ascend, and
	// lastOffsetDelta, at least the last record's, rather than 0..n-1.
	keepDeltas      bool
	lastOffsetDelta int32
	logAppendTime   bool // the records all carry the stamp as Timestamp
}

func build(dst []byte, records []Record, c Compression, l layout) ([]byte, error) {
	if len(records) == 0 {
		return dst, errors.New("build batch: no records")
	}
	if len(records) > math.MaxInt32 {
		return dst, fmt.Errorf("build batch: %d records, at most %d", len(records), math.MaxInt32)
	}
	if !c.valid() {
		return dst, fmt.Errorf("build batch: unknown codec %v", c)
	}
	first := records[0].Timestamp
	maxTS := first
	for i := range records {
		maxTS = max(maxTS, records[i].Timestamp)
	}
	attrs, lastDelta := int16(c), int32(len(records)-1)
	if l.keepDeltas {
		lastDelta = l.lastOffsetDelta
	}
	if l.logAppendTime {
		attrs |= attrLogAppendTime
	}
	hdr := kmsg.RecordBatch{
		FirstOffset:          l.baseOffset,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      lastDelta,
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(records)),
	}
	start := len(dst)
	// The header goes in without its records; Length and CRC are filled in
	// once the records are, which spares copying the records after it.
	out := hdr.AppendTo(dst)
	if c == None {
		out = appendRecords(out, records, first, l.keepDeltas)
	} else {
		raw := rawBuffers.Get().(*[]byte)
		*raw = appendRecords((*raw)[:0], records, first, l.keepDeltas)
		var err error
		out, err = compress(out, *raw, c)
		rawBuffers.Put(raw)
		if err != nil {
			return dst[:start], fmt.Errorf("build batch: %w", err)
		}
	}
	length := len(out) - start - 12
	if length > math.MaxInt32 {
		return dst[:start], fmt.Errorf("build batch: %d bytes, over a batch's limit of %d", length, math.MaxInt32)
	}
	b := out[start:]
	binary.BigEndian.PutUint32(b[offLength:], uint32(length))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], castagnoli))
	return out, nil
}

// appendRecords appends the records uncompressed, numbered 0..n-1 unless
// keepDeltas says to write their own OffsetDelta.
func appendRecords(dst []byte, records []Record, first int64, keepDeltas bool) []byte {
	var headers []kmsg.Header
	for i := range records {
		r := &records[i]
		headers = headers[:0]
		for _, h := range r.Headers {
			headers = append(headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		delta, offsetDelta := r.Timestamp-first, int32(i)
		if keepDeltas {
			offsetDelta = r.OffsetDelta
		}
		kr := kmsg.Record{
			TimestampDelta64: delta,
			TimestampDelta:   int32(delta),
			OffsetDelta:      offsetDelta,
			Key:              r.Key,
			Value:            r.Value,
			Headers:          headers,
		}
		kr.Length = int32(bodySize(&kr))
		dst = kr.AppendTo(dst)
	}
	return dst
}

// bodySize is the encoded size of a record after its length varint.
func bodySize(r *kmsg.Record) int {
	n := 1 + kbin.VarlongLen(r.TimestampDelta64) + kbin.VarintLen(r.OffsetDelta) +
		bytesSize(r.Key) + bytesSize(r.Value) + kbin.VarintLen(int32(len(r.Headers)))
	for _, h := range r.Headers {
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	return n
}

// bytesSize is the encoded size of a nullable varint-length byte string.
func bytesSize(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

// RecordSize is an upper bound of the bytes rec adds to an uncompressed
// batch, its length varint included. The offset and timestamp deltas, which
// depend on the record's place in the batch, count as their largest varints
// (5 and 10 bytes), so a caller can cut batches under a size limit before
// building them.
func RecordSize(rec Record) int {
	n := 1 + 10 + 5 + bytesSize(rec.Key) + bytesSize(rec.Value) + kbin.VarintLen(int32(len(rec.Headers)))
	for _, h := range rec.Headers {
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	return kbin.VarintLen(int32(n)) + n
}

// Records decompresses (if need be) and decodes every record of b, which
// must be exactly one batch. Each record has its OffsetDelta and absolute
// Timestamp: FirstTimestamp plus its delta, or, in a LogAppendTime batch,
// MaxTimestamp, which is the broker's stamp for all of them (Kafka's rule).
// maxDecompressed bounds the decompressed size of a compressed batch,
// refusing a compression bomb (ErrTooLarge) before inflating past it: a
// record count the bound cannot hold is refused before anything is
// inflated; 0 means no bound. Keys, values and header values alias b when
// it is uncompressed, a new buffer otherwise.
//
// The CRC is not checked here: CheckCRC does that.
func Records(b []byte, maxDecompressed int) ([]Record, error) {
	info, err := parseOne(b)
	if err != nil {
		return nil, err
	}
	raw := b[HeaderSize:]
	// Compaction can empty a batch and keep it for its producer state; such
	// a batch has no records bytes to decompress, whatever its codec.
	if c := info.Compression(); c != None && (len(raw) > 0 || info.NumRecords > 0) {
		if err := checkCount(info, maxDecompressed); err != nil {
			return nil, err
		}
		if raw, err = decompress(nil, raw, c, maxDecompressed); err != nil {
			return nil, fmt.Errorf("batch at offset %d: %w", info.BaseOffset, err)
		}
	}
	// A record takes at least MinRecordSize bytes, so a count that cannot
	// fit is refused before it sizes an allocation.
	if int64(info.NumRecords)*MinRecordSize > int64(len(raw)) {
		return nil, fmt.Errorf("batch at offset %d: header says %d records, %d bytes cannot hold them",
			info.BaseOffset, info.NumRecords, len(raw))
	}
	recs := make([]Record, 0, info.NumRecords)
	for i := range int(info.NumRecords) {
		rec, n, err := decodeRecord(raw)
		if err != nil {
			return nil, fmt.Errorf("batch at offset %d: record %d of %d: %w", info.BaseOffset, i, info.NumRecords, err)
		}
		raw = raw[n:]
		if info.LogAppendTime() {
			rec.Timestamp = info.MaxTimestamp
		} else {
			rec.Timestamp += info.FirstTimestamp
		}
		recs = append(recs, rec)
	}
	if len(raw) != 0 {
		return nil, fmt.Errorf("batch at offset %d: %d trailing bytes after the %d records the header counts",
			info.BaseOffset, len(raw), info.NumRecords)
	}
	return recs, nil
}

// checkCount refuses, before anything is inflated, a compressed batch whose
// header counts more records than its bound (positive) can hold: each takes
// at least MinRecordSize bytes decompressed. A bomb of a few KB declaring
// millions of records costs nothing to refuse then.
func checkCount(info Info, bound int) error {
	if need := int64(info.NumRecords) * MinRecordSize; bound > 0 && need > int64(bound) {
		return fmt.Errorf("batch at offset %d: %d records take at least %d bytes decompressed: %w (%d)",
			info.BaseOffset, info.NumRecords, need, ErrTooLarge, bound)
	}
	return nil
}

var errNoRecord = errors.New("no bytes left: fewer records than the header counts")

// decodeRecord decodes the record at the start of raw, with its timestamp
// delta in Timestamp, and returns how many bytes it took.
func decodeRecord(raw []byte) (Record, int, error) {
	if len(raw) == 0 {
		return Record{}, 0, errNoRecord
	}
	length, vn := kbin.Varint(raw)
	if vn <= 0 {
		return Record{}, 0, errors.New("bad length varint")
	}
	if length < 0 || int(length) > len(raw)-vn {
		return Record{}, 0, fmt.Errorf("length %d, %d bytes left", length, len(raw)-vn)
	}
	size := vn + int(length)
	var kr kmsg.Record
	if err := kr.ReadFrom(raw[:size]); err != nil {
		return Record{}, 0, fmt.Errorf("fields overrun its length of %d or hold a bad varint: %w", length, err)
	}
	// ReadFrom does not say how much it read, and Kafka refuses a record
	// whose fields do not fill its length exactly.
	used, err := fieldsLen(raw[vn:size])
	if err != nil {
		return Record{}, 0, err
	}
	if used != int(length) {
		return Record{}, 0, fmt.Errorf("fields take %d bytes of its length of %d: trailing bytes", used, length)
	}
	rec := Record{
		OffsetDelta: kr.OffsetDelta,
		Timestamp:   kr.TimestampDelta64,
		Key:         kr.Key,
		Value:       kr.Value,
	}
	if len(kr.Headers) > 0 {
		rec.Headers = make([]Header, len(kr.Headers))
		for j, h := range kr.Headers {
			rec.Headers[j] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return rec, size, nil
}

// fieldsLen walks a record's fields, after its length, and returns the bytes
// they take, however their varints are encoded.
func fieldsLen(body []byte) (int, error) {
	r := kbin.Reader{Src: body}
	r.Int8()
	r.Varlong()
	r.Varint()
	r.VarintBytes()
	r.VarintBytes()
	n := r.VarintArrayLen()
	if n < 0 {
		// ReadFrom takes it for none; Kafka refuses the record.
		return 0, fmt.Errorf("header count %d", n)
	}
	for range n {
		r.VarintBytes()
		r.VarintBytes()
	}
	if !r.Ok() {
		return 0, errors.New("fields overrun the record's length")
	}
	return len(body) - len(r.Src), nil
}
