package recordbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Legacy message sets are what Kafka stored before 0.11: magic 0 messages
// (before 0.10) and magic 1 messages (0.10, which added a timestamp), and
// what a broker with an old log.message.format.version still writes. A
// broker serves them as its log holds them, whatever its own version, so a
// copy of an old topic meets them. A message is its offset, its size, a
// CRC-32 (IEEE) of what follows the CRC, the magic, the attributes, the
// timestamp (magic 1) and a nullable key and value. A compressed message,
// a wrapper, holds in its value a compressed message set of uncompressed
// inner messages of its magic.

const (
	// legacyHeader0 and legacyHeader1 are the bytes of a message before its
	// key: offset, size, CRC, magic and attributes, and for magic 1 the
	// timestamp. The key and value lengths, 4 bytes each, follow.
	legacyHeader0 = 8 + 4 + 4 + 1 + 1
	legacyHeader1 = legacyHeader0 + 8

	legacyCodec         = 0x07 // attributes bits 0-2, numbered as in v2
	legacyLogAppendTime = 0x08 // attributes bit 3, magic 1 only

	noTimestamp = -1 // Kafka's RecordBatch.NO_TIMESTAMP, what magic 0 records get
)

// legacyMsg is one decoded legacy message; its key and value alias the bytes
// it was read from.
type legacyMsg struct {
	offset     int64
	magic      int8
	attrs      int8
	timestamp  int64 // noTimestamp for magic 0
	key, value []byte
}

// legacyGroup is what one outer message gives FromLegacy: the offsets its
// records span, first to last (a wrapper's own offset counts in last), how
// they are timed, and the bytes they count against the bound.
type legacyGroup struct {
	first, last   int64
	logAppendTime bool
	stamp         int64 // the LogAppendTime stamp
	inflated      int
}

// FromLegacy appends to dst one v2 batch holding the records of the run of
// legacy messages (magic 0 and 1) that b starts with, and returns it with
// the number of bytes of b the run took. The run ends at the end of b, at
// a magic 2 batch, at a message b ends inside of (a fetch response cut at
// its byte limit), or before a message that cannot join the batch: one
// timed differently (below), one whose offsets do not come after the
// run's, one past the bound, or one that cannot be read, which the call
// starting at it reports.
//
// The batch keeps the source's offsets: its base offset is the first
// record's, each record's offset delta is its distance from it (compacted
// logs leave gaps), and the last offset delta reaches the run's last
// offset (a compressed magic 0 message's own, if past its last inner
// message's: the next fetch asks past it). Keys and values are copied byte for byte, null apart from empty,
// and records get no headers. Magic 1 records keep their CreateTime
// timestamps; magic 0 records, which have none, get -1 (Kafka's
// NO_TIMESTAMP); a magic 1 message or wrapper stamped with LogAppendTime
// (attributes bit 3) makes a LogAppendTime batch whose records all carry
// its stamp, as Kafka's own reader and up-conversion time them, so
// messages stamped otherwise end the run. The rest is what Build writes:
// uncompressed (the caller compresses if it wants), partition leader epoch
// -1, producer id, epoch and base sequence -1, neither transactional nor
// control, and the CRC-32C set.
//
// Every message's CRC-32 is checked, inner messages' too, before anything
// of it is used. Wrappers compressed with gzip, snappy (xerial framing, as
// Java writes it, or raw blocks) or lz4 (in magic 0 with the header
// checksum Kafka got wrong too, see fixKafka3160) are decompressed with
// the package's codecs; an inner message
// that is itself compressed, or of another magic than its wrapper (which
// brokers never store: they convert a set to the log's format), is an
// error. A positive maxDecompressed bounds what the batch is built from,
// its messages counted as decompressed: the run ends once they reach it,
// and a wrapper may inflate only to what is left of it, checked as Records
// checks its bound (past it, the run's first message is an error and a
// later one ends the run). 0 means no bound.
//
// No record is dropped for coming before the offset a fetch asked for: a
// wrapper holds those too, and the batch then straddles that offset as a
// v2 batch fetched mid-batch does; skipping them is the caller's business.
//
// Errors name the offset of the message at fault. They wrap ErrTruncated
// when b ends before its first message does (the caller fetches it again,
// whole) and ErrCRC when a message does not match its CRC. On error dst is
// returned as it was, and n is 0.
func FromLegacy(dst, b []byte, maxDecompressed int) (out []byte, n int, err error) {
	var (
		recs []Record
		run  legacyGroup // first is the batch's base offset
	)
	for n == 0 || n < len(b) { // an empty b is ErrTruncated, as Parse makes it
		rest := b[n:]
		if n > 0 && (len(rest) <= offMagic || rest[offMagic] > 1 ||
			maxDecompressed > 0 && run.inflated >= maxDecompressed) {
			break
		}
		budget := 0
		if maxDecompressed > 0 {
			budget = maxDecompressed - run.inflated
		}
		mark := len(recs)
		var g legacyGroup
		var size int
		recs, g, size, err = appendLegacy(recs, rest, budget)
		if n == 0 {
			if err != nil {
				return dst, 0, err
			}
			run, n = g, size
			continue
		}
		if err != nil || g.logAppendTime != run.logAppendTime || g.logAppendTime && g.stamp != run.stamp ||
			g.first <= run.last || g.last-run.first > math.MaxInt32 {
			recs = recs[:mark]
			break
		}
		for i := mark; i < len(recs); i++ {
			recs[i].OffsetDelta += int32(g.first - run.first)
		}
		run.last = g.last
		run.inflated += g.inflated
		n += size
	}
	out, err = build(dst, recs, None, layout{
		baseOffset:      run.first,
		keepDeltas:      true,
		lastOffsetDelta: int32(run.last - run.first),
		logAppendTime:   run.logAppendTime,
	})
	if err != nil {
		return dst, 0, fmt.Errorf("legacy messages at offset %d: %w", run.first, err)
	}
	return out, n, nil
}

// appendLegacy appends the records of the outer message b starts with to
// recs, their offset deltas counted from the group's first offset, and
// returns the message's size. budget bounds a wrapper's decompressed size
// if positive.
func appendLegacy(recs []Record, b []byte, budget int) ([]Record, legacyGroup, int, error) {
	m, size, err := readLegacy(b)
	if err != nil {
		return recs, legacyGroup{}, 0, err
	}
	g := legacyGroup{
		logAppendTime: m.magic == 1 && m.attrs&legacyLogAppendTime != 0,
		stamp:         m.timestamp,
	}
	c := Compression(m.attrs & legacyCodec)
	if c == None {
		g.first, g.last, g.inflated = m.offset, m.offset, size
		return append(recs, Record{Timestamp: m.timestamp, Key: m.key, Value: m.value}), g, size, nil
	}
	inner, inflated, err := unwrapLegacy(m, c, budget)
	if err != nil {
		return recs, legacyGroup{}, 0, fmt.Errorf("message at offset %d (%v): %w", m.offset, c, err)
	}
	// Magic 0 inner offsets are absolute. Magic 1 ones are relative, and
	// the wrapper's offset is the last inner message's, except that Kafka
	// takes a wrapper offset of 0 (some librdkafka versions produced it)
	// to mean the inner offsets are as they are.
	var shift int64
	if lastInner := inner[len(inner)-1].offset; m.magic == 1 && m.offset != 0 {
		if m.offset < lastInner {
			return recs, legacyGroup{}, 0, fmt.Errorf("message at offset %d (%v): below its last inner message's relative offset %d", m.offset, c, lastInner)
		}
		shift = m.offset - lastInner
	}
	g.first = inner[0].offset + shift
	g.last = max(inner[len(inner)-1].offset+shift, m.offset)
	if g.last-g.first > math.MaxInt32 {
		return recs, legacyGroup{}, 0, fmt.Errorf("message at offset %d (%v): inner offsets span %d..%d, more than a batch holds", m.offset, c, g.first, g.last)
	}
	g.inflated = inflated
	for _, in := range inner {
		ts := in.timestamp
		if g.logAppendTime {
			ts = m.timestamp
		}
		recs = append(recs, Record{OffsetDelta: int32(in.offset + shift - g.first), Timestamp: ts, Key: in.key, Value: in.value})
	}
	return recs, g, size, nil
}

// unwrapLegacy decompresses wrapper m's inner message set and reads its
// messages, checked: uncompressed, of m's magic, with ascending offsets.
// It also returns the set's decompressed size.
func unwrapLegacy(m legacyMsg, c Compression, budget int) ([]legacyMsg, int, error) {
	if c != Gzip && c != Snappy && c != LZ4 {
		return nil, 0, fmt.Errorf("codec %d: legacy messages are uncompressed or gzip (1), snappy (2) or lz4 (3)", int8(c))
	}
	if m.value == nil {
		return nil, 0, errors.New("compressed with a null value")
	}
	src := m.value
	if c == LZ4 && m.magic == 0 {
		src = fixKafka3160(src)
	}
	raw, err := decompress(nil, src, c, budget)
	if err != nil {
		return nil, 0, err
	}
	var inner []legacyMsg
	for rest := raw; len(rest) > 0; {
		in, size, err := readLegacy(rest)
		if errors.Is(err, ErrTruncated) {
			// Not a fetch cut short, which the caller would fetch
			// again: the set is whole and damaged.
			return nil, 0, fmt.Errorf("inner message set ends inside its message %d: %v", len(inner), err)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("inner %w", err)
		}
		switch {
		case in.magic != m.magic:
			return nil, 0, fmt.Errorf("inner message at offset %d: magic %d in a magic %d wrapper", in.offset, in.magic, m.magic)
		case in.attrs&legacyCodec != 0:
			return nil, 0, fmt.Errorf("inner message at offset %d: compressed too (codec %d), nested compression", in.offset, in.attrs&legacyCodec)
		case len(inner) > 0 && in.offset <= inner[len(inner)-1].offset:
			return nil, 0, fmt.Errorf("inner message at offset %d after offset %d: offsets not ascending", in.offset, inner[len(inner)-1].offset)
		}
		inner = append(inner, in)
		rest = rest[size:]
	}
	if len(inner) == 0 {
		return nil, 0, errors.New("no inner messages")
	}
	return inner, len(raw), nil
}

// readLegacy decodes the message b starts with, its CRC checked, and
// returns its size. It fails with ErrTruncated if b ends before it does.
func readLegacy(b []byte) (legacyMsg, int, error) {
	if len(b) <= offMagic {
		return legacyMsg{}, 0, fmt.Errorf("%w: %d bytes, a legacy message needs %d", ErrTruncated, len(b), legacyHeader0+8)
	}
	offset := int64(binary.BigEndian.Uint64(b))
	magic := int8(b[offMagic])
	header := legacyHeader0
	switch magic {
	case 0:
	case 1:
		header = legacyHeader1
	default:
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: magic %d, not a legacy message", offset, magic)
	}
	length := int32(binary.BigEndian.Uint32(b[offLength:]))
	if int(length) < header+8-12 {
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: size %d, below a magic %d message's %d", offset, length, magic, header+8-12)
	}
	size := 12 + int(length)
	if len(b) < size {
		return legacyMsg{}, 0, fmt.Errorf("%w: message at offset %d needs %d bytes, have %d", ErrTruncated, offset, size, len(b))
	}
	msg := b[:size]
	if want, got := binary.BigEndian.Uint32(msg[12:]), crc32.ChecksumIEEE(msg[offMagic:]); got != want {
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: %w: want %08x, got %08x", offset, ErrCRC, want, got)
	}
	m := legacyMsg{offset: offset, magic: magic, timestamp: noTimestamp}
	var err error
	if magic == 0 {
		var v kmsg.MessageV0
		err = v.ReadFrom(msg)
		m.attrs, m.key, m.value = v.Attributes, v.Key, v.Value
	} else {
		var v kmsg.MessageV1
		err = v.ReadFrom(msg)
		m.attrs, m.timestamp, m.key, m.value = v.Attributes, v.Timestamp, v.Key, v.Value
	}
	if err != nil {
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: key or value overruns its size of %d", offset, length)
	}
	// Checked like a v2 record's fields: bytes the key and value leave
	// over are damage the CRC happens to cover, not data.
	if used := header + 4 + len(m.key) + 4 + len(m.value); used != size {
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: key and value end at byte %d of its %d: trailing bytes", offset, used, size)
	}
	if offset < 0 {
		return legacyMsg{}, 0, fmt.Errorf("message at offset %d: negative offset", offset)
	}
	return m, size, nil
}

// lz4FrameMagic opens an LZ4 frame: 0x184D2204, little-endian.
var lz4FrameMagic = []byte{0x04, 0x22, 0x4d, 0x18}

// fixKafka3160 returns the LZ4 frame src with the header checksum of its
// frame descriptor (the byte after it: the second byte of its XXH32)
// recomputed, in a copy if it was wrong. Kafka before 0.10 computed that
// byte over the frame's magic number and descriptor instead of the
// descriptor alone (KAFKA-3160), and kept doing so for magic 0 messages
// afterwards, which old clients read: Kafka's own reader ignores the byte
// in magic 0 messages and checks it in magic 1 ones. pierrec/lz4 always
// checks it, so magic 0 frames are mended before they reach it, and magic
// 1 frames with the wrong byte are refused, as Kafka refuses them. Only
// the first frame is mended: Kafka writes one per message.
func fixKafka3160(src []byte) []byte {
	if !bytes.HasPrefix(src, lz4FrameMagic) || len(src) < 7 {
		return src
	}
	flags := src[4]
	at := 4 + 2 // the descriptor: flags, block size, then the optional fields
	if flags&0x08 != 0 {
		at += 8 // content size
	}
	if flags&0x01 != 0 {
		at += 4 // dictionary id
	}
	if len(src) <= at {
		return src
	}
	want := byte(xxh32Short(src[4:at]) >> 8)
	if src[at] == want {
		return src
	}
	fixed := bytes.Clone(src)
	fixed[at] = want
	return fixed
}

// xxh32Short is XXH32 with seed 0 of b, which must be shorter than 16
// bytes (an LZ4 frame descriptor takes 14 at most): inputs that short skip
// the algorithm's 16-byte stripes. pierrec/lz4 keeps its XXH32 internal.
func xxh32Short(b []byte) uint32 {
	const (
		prime1 = 2654435761
		prime2 = 2246822519
		prime3 = 3266489917
		prime4 = 668265263
		prime5 = 374761393
	)
	h := uint32(prime5) + uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		h += binary.LittleEndian.Uint32(b) * prime3
		h = bits.RotateLeft32(h, 17) * prime4
	}
	for _, c := range b {
		h += uint32(c) * prime5
		h = bits.RotateLeft32(h, 11) * prime1
	}
	h ^= h >> 15
	h *= prime2
	h ^= h >> 13
	h *= prime3
	h ^= h >> 16
	return h
}
