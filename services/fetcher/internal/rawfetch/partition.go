package rawfetch

import (
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// magicAt is where every Kafka message format keeps its magic byte: after
// the offset (8), the length (4) and the leader epoch or CRC (4).
const magicAt = 16

// maxLegacy bounds what the legacy message sets (magic 0 and 1) of one
// partition's answer become once converted: each run's decompressed size
// (recordbatch.FromLegacy's bound: a larger compressed message, or a
// compression bomb, is an Err), and the converted batches' total, past
// which the Result ends and the next round goes on from Next. A variable
// so that tests can lower it.
var maxLegacy = 64 << 20

// readPartition makes the Result of a partition the broker answered
// without error: the complete batches at or past asked, less control
// batches and aborted transactions, and the offset to ask next. Each run
// of legacy messages becomes one v2 batch (recordbatch.FromLegacy), in its
// place among the others: a topic whose message format was upgraded holds
// legacy messages, then v2 batches.
//
// When it stops early on bytes it cannot pass on (a damaged batch or
// message, a legacy message it cannot convert), Err says why, and Batches
// and Next still hold what came before: those are good, and asking Next
// again reaches the same bytes.
func readPartition(asked int64, rp *kmsg.FetchResponseTopicPartition) Result {
	r := Result{
		Records:          rp.RecordBatches,
		Next:             asked,
		HighWatermark:    rp.HighWatermark,
		LastStableOffset: rp.LastStableOffset,
		LogStartOffset:   rp.LogStartOffset,
		LastEpoch:        -1,
	}
	aborted := newAborts(rp.AbortedTransactions)
	end := int64(-1) // one past the last complete batch seen, to check order
	converted := 0   // bytes of the batches made of legacy messages
	for rest := rp.RecordBatches; len(rest) > 0; {
		var (
			batch []byte
			info  recordbatch.Info
			err   error
		)
		if len(rest) > magicAt && rest[magicAt] < 2 {
			if converted >= maxLegacy {
				return r
			}
			batch, info, rest, err = fromLegacy(rest)
			converted += len(batch)
		} else {
			batch, info, rest, err = nextBatch(rest)
		}
		if errors.Is(err, recordbatch.ErrTruncated) {
			// The response was cut at its byte limit mid-batch; the
			// next round asks from Next and gets this batch whole.
			return r
		}
		if err != nil {
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
		r.noteEpoch(info)

		// Legacy messages have no producer and no transactions, so the
		// batches made of them are neither control nor transactional.
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

// noteEpoch keeps the leader epoch of a batch read, dropped or not: the
// next fetch names the last one (LastFetchedEpoch), and Epochs where each
// began. A legacy message has none (-1).
func (r *Result) noteEpoch(info recordbatch.Info) {
	e := info.PartitionLeaderEpoch
	if info.Magic < 2 {
		e = -1
	}
	if e >= 0 && e != r.LastEpoch {
		r.Epochs = append(r.Epochs, EpochStart{Epoch: e, Start: info.BaseOffset})
	}
	r.LastEpoch = e
}

// nextBatch cuts the v2 batch rest starts with, its CRC checked, and
// returns it, parsed, with what follows it.
func nextBatch(rest []byte) (batch []byte, info recordbatch.Info, after []byte, err error) {
	info, err = recordbatch.Parse(rest)
	if err != nil {
		return nil, info, rest, err
	}
	size := info.Size()
	batch = rest[:size:size]
	// The CRC covers the attributes, the last offset delta and the
	// producer id that the filtering trusts: a flipped control or
	// transactional bit would drop data silently.
	if err := recordbatch.CheckCRC(batch); err != nil {
		return nil, info, rest, err
	}
	return batch, info, rest[size:], nil
}

// fromLegacy converts the run of legacy messages rest starts with into a
// v2 batch, every message's CRC checked, and returns it, parsed, with what
// follows the run. A run ends before a message cut short, or one it
// cannot convert: the next call reports that one, ErrTruncated for a cut.
func fromLegacy(rest []byte) (batch []byte, info recordbatch.Info, after []byte, err error) {
	batch, n, err := recordbatch.FromLegacy(nil, rest, maxLegacy)
	if err != nil {
		return nil, info, rest, err
	}
	batch = batch[:len(batch):len(batch)] // its own memory, capped as the others are
	if info, err = recordbatch.Parse(batch); err != nil {
		return nil, info, rest, fmt.Errorf("converted legacy messages: %v", err) // a bug, not the source
	}
	return batch, info, rest[n:], nil
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
