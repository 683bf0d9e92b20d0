package rawfetch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// magicAt is where every Kafka message format keeps its magic byte: after
// the offset (8), the length (4) and the leader epoch or CRC (4).
const magicAt = 16

// readPartition makes the Result of a partition the broker answered
// without error: the complete batches at or past asked, less control
// batches and aborted transactions, and the offset to ask next.
//
// When it stops early on bytes it cannot pass on (a legacy message set, a
// damaged batch), Err says why, and Batches and Next still hold what came
// before: those are good, and asking Next again reaches the same bytes.
func readPartition(asked int64, rp *kmsg.FetchResponseTopicPartition) Result {
	r := Result{
		Next:             asked,
		HighWatermark:    rp.HighWatermark,
		LastStableOffset: rp.LastStableOffset,
		LogStartOffset:   rp.LogStartOffset,
	}
	aborted := newAborts(rp.AbortedTransactions)
	end := int64(-1) // one past the last complete batch seen, to check order
	for rest := rp.RecordBatches; len(rest) > 0; {
		// The magic is checked before Parse, which refuses a legacy
		// message set too, so that this error can say what it is.
		if len(rest) > magicAt && rest[magicAt] != 2 {
			r.Err = fmt.Errorf("batch at offset %d: %w (magic %d)", int64(binary.BigEndian.Uint64(rest)), ErrLegacyMessageSet, rest[magicAt])
			return r
		}
		info, err := recordbatch.Parse(rest)
		if errors.Is(err, recordbatch.ErrTruncated) {
			// The response was cut at its byte limit mid-batch; the
			// next round asks from Next and gets this batch whole.
			return r
		}
		if err != nil {
			r.Err = err
			return r
		}
		size := info.Size()
		batch := rest[:size:size]
		rest = rest[size:]
		// The CRC covers the attributes, the last offset delta and the
		// producer id that the filtering below trusts: a flipped control
		// or transactional bit would drop data silently.
		if err := recordbatch.CheckCRC(batch); err != nil {
			r.Err = err
			return r
		}
		// The base offset is outside the CRC, so the order is checked:
		// batches that overlap or go back would duplicate records.
		last := info.BaseOffset + int64(info.LastOffsetDelta)
		if info.LastOffsetDelta < 0 || info.BaseOffset < end {
			r.Err = fmt.Errorf("batch at offset %d (last delta %d) after a batch ending at %d: offsets out of order", info.BaseOffset, info.LastOffsetDelta, end)
			return r
		}
		end = last + 1
		r.Next = max(r.Next, end)

		inAborted := aborted.covers(info.ProducerID, info.BaseOffset)
		if info.Control() {
			// A producer has one transaction open on a partition at
			// a time, so its first marker at or after an aborted
			// transaction's first offset is that transaction's abort
			// marker: the header says enough, without reading the
			// marker record to see whether it aborts or commits.
			if inAborted {
				aborted.close(info.ProducerID)
			}
			continue
		}
		if inAborted && info.Transactional() {
			continue
		}
		// Kafka returns whole batches, so the first may start before
		// asked; one that ends before it holds nothing asked for.
		if last < asked {
			continue
		}
		r.Batches = append(r.Batches, batch)
	}
	return r
}

// aborts holds, per producer id, the first offsets of the producer's
// aborted transactions that no marker in the response has closed yet,
// ascending. A producer's transactional batch is aborted when it starts at
// or after the smallest: it belongs to that transaction or to one after it
// that is also aborted (a committed one would have needed the aborted
// one's marker first, which pops it).
type aborts map[int64][]int64

func newAborts(list []kmsg.FetchResponseTopicPartitionAbortedTransaction) aborts {
	if len(list) == 0 {
		return nil
	}
	a := make(aborts)
	for _, at := range list {
		a[at.ProducerID] = append(a[at.ProducerID], at.FirstOffset)
	}
	// Apache Kafka lists them in order, but nothing in the protocol says
	// so (Redpanda does not), and covers relies on the smallest first.
	for pid := range a {
		slices.Sort(a[pid])
	}
	return a
}

// covers reports whether a batch of producer pid starting at base lies in
// one of the producer's aborted transactions.
func (a aborts) covers(pid, base int64) bool {
	firsts := a[pid]
	return len(firsts) > 0 && base >= firsts[0]
}

// close ends the producer's earliest aborted transaction, at its marker.
func (a aborts) close(pid int64) {
	if firsts := a[pid]; len(firsts) > 1 {
		a[pid] = firsts[1:]
	} else {
		delete(a, pid)
	}
}
