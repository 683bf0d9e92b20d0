package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Record is one Kafka record as Ferry carries it. Key and Value are nil for
// a null key or value, which Kafka distinguishes from empty.
type Record struct {
	Offset    int64
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is one record header. A nil Value is a null header value.
type Header struct {
	Key   []byte
	Value []byte
}

// ErrMalformed reports a payload whose framing is not valid Ferry encoding.
var ErrMalformed = errors.New("malformed batch")

// Encoder accumulates the records of one partition in Ferry's record
// encoding (PAYLOAD_FORMAT_FERRY_V1). The zero value is ready to use.
type Encoder struct {
	buf   []byte
	first int64
	last  int64
	count int
}

// Append adds a record with its headers. Offsets must grow.
func (e *Encoder) Append(offset, timestamp int64, key, value []byte, headers []Header) {
	e.Begin(offset, timestamp, key, value, len(headers))
	for _, h := range headers {
		e.Header(h.Key, h.Value)
	}
}

// Begin adds a record whose n headers follow through Header. It lets a
// caller copy headers from another client's types without building a slice.
func (e *Encoder) Begin(offset, timestamp int64, key, value []byte, n int) {
	if e.count == 0 {
		e.first = offset
	}
	e.last = offset
	e.count++
	e.buf = binary.AppendUvarint(e.buf, uint64(offset-e.first))
	e.buf = binary.AppendVarint(e.buf, timestamp)
	e.buf = appendNullable(e.buf, key)
	e.buf = appendNullable(e.buf, value)
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
}

// Header adds one header to the record last begun.
func (e *Encoder) Header(key, value []byte) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(key)))
	e.buf = append(e.buf, key...)
	e.buf = appendNullable(e.buf, value)
}

// Len is the encoded size so far, in bytes.
func (e *Encoder) Len() int { return len(e.buf) }

// Count is the number of records so far.
func (e *Encoder) Count() int { return e.count }

// FirstOffset and LastOffset are the offsets of the first and last record.
func (e *Encoder) FirstOffset() int64 { return e.first }

// LastOffset is the offset of the last record appended.
func (e *Encoder) LastOffset() int64 { return e.last }

// Bytes returns the encoded records; valid until the next Reset.
func (e *Encoder) Bytes() []byte { return e.buf }

// Reset empties the encoder and keeps its buffer.
func (e *Encoder) Reset() {
	e.buf = e.buf[:0]
	e.count = 0
	e.first, e.last = 0, 0
}

func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// Decode parses count records encoded by an Encoder whose first record had
// offset first. The records alias data. It checks the framing strictly:
// every length within the data, offsets growing, nothing left over.
func Decode(data []byte, first int64, count int) ([]Record, error) {
	if count < 0 {
		return nil, fmt.Errorf("%w: negative record count", ErrMalformed)
	}
	// A record takes at least 5 bytes, which bounds a forged count before
	// anything is allocated for it.
	if count > len(data)/5 {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrMalformed, count, len(data))
	}
	d := decoder{data: data}
	recs := make([]Record, count)
	prev := int64(-1)
	for i := range recs {
		r := &recs[i]
		delta := d.uvarint()
		r.Offset = first + int64(delta)
		r.Timestamp = d.varint()
		r.Key = d.nullable()
		r.Value = d.nullable()
		n := d.uvarint()
		if d.err == nil && n > uint64(len(d.data)-d.pos)/2 {
			d.fail("header count %d exceeds the data", n)
		}
		if d.err == nil && n > 0 {
			r.Headers = make([]Header, n)
			for j := range r.Headers {
				r.Headers[j].Key = d.bytes(d.uvarint())
				r.Headers[j].Value = d.nullable()
			}
		}
		if d.err != nil {
			return nil, fmt.Errorf("record %d: %w", i, d.err)
		}
		if delta > 1<<62 || r.Offset <= prev || (i == 0 && delta != 0) {
			return nil, fmt.Errorf("%w: record %d: offset %d out of order", ErrMalformed, i, r.Offset)
		}
		prev = r.Offset
	}
	if d.pos != len(d.data) {
		return nil, fmt.Errorf("%w: %d bytes after the last record", ErrMalformed, len(d.data)-d.pos)
	}
	return recs, nil
}

// decoder reads the encoding with sticky errors, so the record loop above
// reads as the format does and checks once per record.
type decoder struct {
	data []byte
	pos  int
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.pos:])
	if n <= 0 {
		d.fail("bad varint at byte %d", d.pos)
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.data[d.pos:])
	if n <= 0 {
		d.fail("bad varint at byte %d", d.pos)
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.data)-d.pos) {
		d.fail("length %d at byte %d exceeds the data", n, d.pos)
		return nil
	}
	b := d.data[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return b
}

func (d *decoder) nullable() []byte {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	return d.bytes(n - 1)
}
