package recordbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Builder joins records into one batch, record by record (AddRecord) or a
// whole source batch at a time (AddBatch). A source batch's records are
// not decoded: each one's length, timestamp delta and offset delta are
// written anew and the rest of it (attributes, key, value, headers) is
// copied as it is. This is how the writer turns many small source batches
// into few target batches (Kafka takes one batch per partition in a
// produce request) for the cost of decompressing and compressing them, not
// of decoding every record into values and encoding it again.
//
// A Builder keeps its buffers across batches (Reset), so a caller that
// builds batch after batch allocates little more than the batches it
// keeps. It is not safe for concurrent use.
type Builder struct {
	recs       []byte // the records, uncompressed
	n          int32
	first, max int64 // FirstTimestamp and MaxTimestamp
	scratch    []byte
	packed     []byte
}

// Len is the size of the batch so far, uncompressed: what Build makes of it
// with codec None.
func (b *Builder) Len() int { return HeaderSize + len(b.recs) }

// Records is the number of records added since the last Reset.
func (b *Builder) Records() int { return int(b.n) }

// Reset empties the builder, keeping its memory.
func (b *Builder) Reset() { b.recs, b.n = b.recs[:0], 0 }

// AddRecord appends rec if the batch stays within limit bytes uncompressed
// (Len), and reports whether it did.
func (b *Builder) AddRecord(rec Record, limit int) bool {
	if b.n == 0 {
		b.first, b.max = rec.Timestamp, rec.Timestamp
	}
	mark := len(b.recs)
	r := kmsg.Record{
		TimestampDelta64: rec.Timestamp - b.first,
		OffsetDelta:      b.n,
		Key:              rec.Key,
		Value:            rec.Value,
	}
	r.TimestampDelta = int32(r.TimestampDelta64)
	for _, h := range rec.Headers {
		r.Headers = append(r.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
	}
	r.Length = int32(bodySize(&r))
	b.recs = r.AppendTo(b.recs)
	if b.Len() > limit {
		b.recs = b.recs[:mark]
		return false
	}
	b.n++
	b.max = max(b.max, rec.Timestamp)
	return true
}

// ErrCannotMerge reports a batch whose records cannot join another batch
// as they are: LogAppendTime timestamps, offset gaps or a control batch.
var ErrCannotMerge = errors.New("batch cannot be merged")

// AddBatch appends every record of raw, exactly one v2 batch with
// CreateTime timestamps and consecutive offsets, if the batch being built
// stays within limit bytes uncompressed (Len). It reports whether it did;
// when it did not, nothing was added.
//
// Nothing is inflated past what could fit: records that take more than
// limit bytes uncompressed do not fit (false), and neither does a batch
// whose header counts more records than limit bytes can hold; both are
// found without decompressing more than limit bytes (a compression bomb
// costs the limit, not what it inflates to). maxDecompressed (0: none)
// is a hard bound: a batch inflating past it, when it is below limit, is
// an error wrapping ErrTooLarge. Each record is checked as Records checks
// it (its fields fill its length exactly); the CRC is the caller's to
// check.
func (b *Builder) AddBatch(raw []byte, maxDecompressed, limit int) (bool, error) {
	info, err := parseOne(raw)
	if err != nil {
		return false, err
	}
	if info.LogAppendTime() || info.Control() || info.NumRecords != info.LastOffsetDelta+1 || info.Size() != len(raw) {
		return false, fmt.Errorf("batch at offset %d: %w", info.BaseOffset, ErrCannotMerge)
	}
	bound, hard := limit, maxDecompressed > 0 && maxDecompressed < limit
	if hard {
		bound = maxDecompressed
	}
	src := raw[HeaderSize:]
	if c := info.Compression(); c != None && len(src) > 0 {
		err := checkCount(info, bound)
		if err == nil {
			b.scratch, err = decompress(b.scratch, src, c, bound)
			if err != nil {
				err = fmt.Errorf("batch at offset %d: %w", info.BaseOffset, err)
			}
		}
		if errors.Is(err, ErrTooLarge) && !hard {
			return false, nil // larger than a batch of limit bytes
		}
		if err != nil {
			return false, err
		}
		src = b.scratch
	}
	mark, n, first, maxTS := len(b.recs), b.n, b.first, b.max
	undo := func() { b.recs, b.n, b.first, b.max = b.recs[:mark], n, first, maxTS }
	for i := range info.NumRecords {
		used, err := b.addRaw(src, info.FirstTimestamp, i)
		if err != nil {
			undo()
			return false, fmt.Errorf("batch at offset %d: record %d of %d: %w", info.BaseOffset, i, info.NumRecords, err)
		}
		src = src[used:]
		if b.Len() > limit {
			undo()
			return false, nil
		}
	}
	if len(src) != 0 {
		undo()
		return false, fmt.Errorf("batch at offset %d: %d trailing bytes after the %d records the header counts", info.BaseOffset, len(src), info.NumRecords)
	}
	return true, nil
}

// addRaw appends the encoded record at the start of src, the delta-th of a
// batch whose FirstTimestamp is base, and returns the bytes it took.
func (b *Builder) addRaw(src []byte, base int64, delta int32) (int, error) {
	if len(src) == 0 {
		return 0, errNoRecord
	}
	length, vn := kbin.Varint(src)
	if vn <= 0 {
		return 0, errors.New("bad length varint")
	}
	if length < 0 || int(length) > len(src)-vn {
		return 0, fmt.Errorf("length %d, %d bytes left", length, len(src)-vn)
	}
	body := src[vn : vn+int(length)]
	used, err := fieldsLen(body)
	if err != nil {
		return 0, err
	}
	if used != int(length) {
		return 0, fmt.Errorf("fields take %d bytes of its length of %d: trailing bytes", used, length)
	}
	// fieldsLen has walked them: the attributes, the deltas, and the rest.
	attrs := body[0]
	tsDelta, tn := kbin.Varlong(body[1:])
	offDelta, on := kbin.Varint(body[1+tn:])
	if offDelta != delta {
		return 0, fmt.Errorf("offset delta %d, want %d", offDelta, delta)
	}
	rest := body[1+tn+on:]
	ts := base + tsDelta
	if b.n == 0 {
		b.first, b.max = ts, ts
	}
	newTS := ts - b.first
	size := 1 + kbin.VarlongLen(newTS) + kbin.VarintLen(b.n) + len(rest)
	b.recs = kbin.AppendVarint(b.recs, int32(size))
	b.recs = append(b.recs, attrs)
	b.recs = kbin.AppendVarlong(b.recs, newTS)
	b.recs = kbin.AppendVarint(b.recs, b.n)
	b.recs = append(b.recs, rest...)
	b.n++
	b.max = max(b.max, ts)
	return vn + int(length), nil
}

// Build returns a new batch of the records added, compressed with c, as
// Build (the function) writes one: base offset 0, CreateTime, offset
// deltas 0..n-1, producer fields -1 and the CRC set. The builder keeps its
// records until Reset, so a caller may build them again with another codec.
func (b *Builder) Build(c Compression) ([]byte, error) {
	if b.n == 0 {
		return nil, errors.New("build batch: no records")
	}
	if !c.valid() {
		return nil, fmt.Errorf("build batch: unknown codec %v", c)
	}
	payload := b.recs
	if c != None {
		var err error
		if b.packed, err = compress(b.packed[:0], b.recs, c); err != nil {
			return nil, fmt.Errorf("build batch: %w", err)
		}
		payload = b.packed
	}
	if HeaderSize+len(payload)-12 > math.MaxInt32 {
		return nil, fmt.Errorf("build batch: %d bytes, over a batch's limit of %d", HeaderSize+len(payload), math.MaxInt32)
	}
	hdr := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(c),
		LastOffsetDelta:      b.n - 1,
		FirstTimestamp:       b.first,
		MaxTimestamp:         b.max,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           b.n,
	}
	// Exactly the batch's size: it is kept until the target acknowledges
	// it, while the builder's buffers serve the next one.
	out := hdr.AppendTo(make([]byte, 0, HeaderSize+len(payload)))
	out = append(out, payload...)
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[crcStart:], castagnoli))
	return out, nil
}
