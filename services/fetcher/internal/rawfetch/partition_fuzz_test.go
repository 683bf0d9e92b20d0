package rawfetch

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// FuzzReadPartition feeds readPartition a partition of a Fetch response as
// a source broker, or anything between it and the fetcher, may send it:
// the records bytes, the offset asked and an aborted transaction. Beyond
// not panicking, what it passes on is what pass-through may copy: whole v2
// batches with sound CRCs, never a control batch, each ending at or past
// what was asked and before Next, in ascending offsets; a batch that was
// v2 on the wire is passed byte for byte; Next never goes back; and an
// error leaves the read at a batch boundary the same bytes reach again.
func FuzzReadPartition(f *testing.F) {
	for _, s := range [][]byte{
		concat(f, data(0, 3), txn(7, 3, 2), marker(7, 5), data(6, 2)),
		concat(f, txn(7, 0, 2), data(2, 1), marker(7, 3), txn(7, 4, 1)),
		join(legacy(0, 1), concat(f, data(2, 3))),
		legacyGzip(f, 10, 3),
		damaged(legacy(0, 1)),
		concat(f, data(5, 2), data(3, 1)), // out of order
		concat(f, data(0, 4))[:40],        // cut mid-batch
	} {
		f.Add(s, int64(0), int64(7), int64(0))
		f.Add(s, int64(3), int64(7), int64(3))
	}
	f.Fuzz(func(t *testing.T, records []byte, asked, abortPID, abortFirst int64) {
		if asked < 0 {
			return // the fetcher asks for offsets it holds, never below 0
		}
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.RecordBatches, rp.HighWatermark, rp.LastStableOffset = records, 1<<62, 1<<62
		rp.AbortedTransactions = aborted(abortPID, abortFirst)
		r := readPartition(asked, &rp)
		if r.Next < asked {
			t.Fatalf("Next %d below the offset asked, %d", r.Next, asked)
		}
		end := int64(-1)
		for i, b := range r.Batches {
			info, err := recordbatch.Parse(b)
			if err != nil || info.Size() != len(b) {
				t.Fatalf("batch %d of %d bytes does not parse whole: %+v, %v", i, len(b), info, err)
			}
			if err := recordbatch.CheckCRC(b); err != nil {
				t.Fatalf("batch %d passed with a bad CRC: %v", i, err)
			}
			last := info.BaseOffset + int64(info.LastOffsetDelta)
			switch {
			case info.Control():
				t.Fatalf("batch %d is a control batch", i)
			case last < asked:
				t.Fatalf("batch %d ends at %d, before the offset asked, %d", i, last, asked)
			case info.BaseOffset < end:
				t.Fatalf("batch %d starts at %d, inside the one before (ending %d)", i, info.BaseOffset, end-1)
			case last >= r.Next:
				t.Fatalf("batch %d ends at %d, at or past Next %d", i, last, r.Next)
			case info.Transactional() && info.ProducerID == abortPID && info.BaseOffset >= abortFirst && !markedBefore(records, abortPID, abortFirst, info.BaseOffset):
				t.Fatalf("batch %d (producer %d at %d) is in a transaction the broker says was aborted from %d", i, abortPID, info.BaseOffset, abortFirst)
			}
			end = last + 1
			if len(records) > magicAt && records[magicAt] == 2 && i == 0 && !bytes.Contains(records, b) {
				t.Fatalf("batch %d was v2 on the wire but is not passed byte for byte", i)
			}
		}
	})
}

// markedBefore reports whether records hold a control batch of pid at or
// after from and before at: the aborted transaction's marker, which ends
// it.
func markedBefore(records []byte, pid, from, at int64) bool {
	for rest := records; len(rest) > 0; {
		if len(rest) > magicAt && rest[magicAt] < 2 {
			return false // legacy: no producers, no markers
		}
		_, info, after, err := nextBatch(rest)
		if err != nil {
			return false
		}
		if info.Control() && info.ProducerID == pid && info.BaseOffset >= from && info.BaseOffset < at {
			return true
		}
		rest = after
	}
	return false
}
