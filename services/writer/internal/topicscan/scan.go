// Package topicscan reads one of the writer's own topics back whole, as
// it stands when the read begins: from each partition's log start to its
// last stable offset, read_committed and keeping control records. That is
// the read every internal topic needs at start (group state, heartbeats):
// a read_uncommitted reader waiting for the record at the high watermark
// minus one never sees it when a transaction's marker stands there (one
// transactional record written by anyone held such a reader forever).
package topicscan

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Scan calls f with every committed data record of topic, partition by
// partition in offset order, up to the last stable offset each partition
// has when Scan begins; what is written later is the caller's own. pick,
// when not nil, is given the topic's partition count and names the
// partitions to read (the offset index reads those its keys fall in),
// each with the offset to read it from (0: its log start; an offset below
// the log start reads from there too). A
// client is built from opts (the cluster's seeds, TLS, SASL) for the read
// and closed after it.
func Scan(ctx context.Context, opts []kgo.Opt, topic string, pick func(partitions int32) map[int32]int64, f func(*kgo.Record)) error {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("topic %s: client: %w", topic, err)
	}
	admin := kadm.NewClient(adm)
	defer admin.Close()
	ends, err := admin.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("topic %s: last stable offsets: %w", topic, err)
	}
	starts, err := admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("topic %s: log start offsets: %w", topic, err)
	}
	var only map[int32]int64
	if pick != nil {
		only = pick(int32(len(ends[topic])))
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, e.Partition)
		at, picked := only[e.Partition]
		at = max(at, s.Offset)
		if at < e.Offset && (pick == nil || picked) {
			from[e.Partition], left[e.Partition] = kgo.NewOffset().At(at), e.Offset
		}
	})
	if len(left) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Markers are kept so that the read sees the offset before the
		// last stable offset even when a marker holds it.
		kgo.KeepControlRecords(),
		// Compaction or retention may remove what the read has not
		// reached yet: go on from what is left.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return fmt.Errorf("topic %s: consumer: %w", topic, err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read topic %s: %d of %d partitions not read to their last stable offset: %w", topic, len(left), len(from), err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("read topic %s/%d: %w", topic, errs[0].Partition, errs[0].Err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			end, reading := left[rec.Partition]
			if !reading {
				continue // read to its end already
			}
			if rec.Offset+1 >= end {
				delete(left, rec.Partition)
				cl.PauseFetchPartitions(map[string][]int32{topic: {rec.Partition}})
				if rec.Offset >= end {
					continue
				}
			}
			if !rec.Attrs.IsControl() {
				f(rec)
			}
		}
	}
	return nil
}
