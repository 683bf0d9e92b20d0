package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/provenance"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/stages"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

// The read path passes the source's batches through: it sends the
// source's own Kafka record batches, as the broker stores them, in wire
// batches of format PAYLOAD_FORMAT_KAFKA_RECORD_BATCH_V2: nothing is
// decompressed, decoded or rebuilt on the way. One loop per session
// fetches all the session's partitions in rawfetch rounds; positions start
// where startOffset says and live in the loop only (the next session
// resumes from the writer's answer). What the loop seals goes through the
// session's queue (s.out) to send, which numbers the batches and holds the
// in-flight credit; acknowledgements and the drain are the session's.
//
// The loop does not decode records, so a record larger than
// writers.max_message_bytes inside a smaller Kafka batch reaches the
// writer, whose refusal names it and stops the partition through
// stopRefused. A Kafka batch that alone is larger than
// writers.max_message_bytes (a source topic whose max.message.bytes is
// above it) cannot travel whole: its records travel in Ferry's own format
// instead (sealRecords), cut at link.batch.max_bytes, and one record above
// the limit stops the partition there, before the writer sees it.

// maxTraceDecode bounds what one Kafka batch may inflate to when it is
// decoded for tracing: a larger one (or a compression bomb) is not traced
// record by record rather than costing the fetcher its memory.
const maxTraceDecode = 64 << 20

// ptPartition is a partition the fetch loop (passThrough) reads.
type ptPartition struct {
	p discovery.Partition
	// topicID is the id of the topic the shard opened with (nil if the
	// source gives none): a round from another topic of the same name is
	// a recreated topic's.
	topicID []byte
	next    int64 // the offset the next round asks
	// sent is the offset after the last wire batch queued: where the
	// writer's checkpoint will be once that batch is acknowledged.
	sent int64
	// begun is set once the session queued anything of the partition:
	// its first wire batch starts at the session's start (startGap).
	begun bool
	// the metrics' series, looked up once
	records, rawBytes, wireBytes prometheus.Counter
}

// positions resolves where each partition to read starts (startOffset) to
// a concrete offset: rawfetch is given offsets, not oldest or newest.
func (r *Runner) positions(resume map[discovery.Partition]*ferryv1.PartitionPosition) (map[discovery.Partition]int64, error) {
	pos := map[discovery.Partition]int64{}
	err := r.forEachStart(resume, func(p discovery.Partition, offset int64) error {
		if offset < 0 { // sarama.OffsetOldest or OffsetNewest
			o, err := r.deps.Client.GetOffset(p.Topic, p.Partition, offset)
			if err != nil {
				return fmt.Errorf("start offset of %s/%d: %w", p.Topic, p.Partition, err)
			}
			offset = o
		}
		pos[p] = offset
		return nil
	})
	return pos, err
}

// resumeEpochs gives reader the leader epoch of the record before each
// partition's start, where the runner read it in an earlier session, so
// that its first round checks that the source's log still reaches the
// start (OffsetForLeaderEpoch): an unclean election between sessions
// otherwise goes unseen. A start the runner never read (a fetcher
// restarted, a shard that moved here) is not checked: the checkpoint
// carries no epoch. Once the round reads a batch, every fetch after it
// names that batch's epoch, and the leader checks.
func (r *Runner) resumeEpochs(reader *rawfetch.Reader, start map[discovery.Partition]int64) {
	for p, off := range start {
		if e, ok := r.epochs(p).epochAt(off - 1); ok {
			reader.Resume(rawfetch.Partition{Topic: p.Topic, Partition: p.Partition}, off, e)
		}
	}
}

// passThrough fetches rounds from the partitions' start offsets until ctx
// ends (a drain or a lost lease) or every partition has stopped. Its error
// is the fetcher's own failure (its client closed), which fails the
// session, or errTopicReopen.
func (s *session) passThrough(ctx context.Context, start map[discovery.Partition]int64) error {
	r := s.r
	parts := make(map[rawfetch.Partition]*ptPartition, len(start))
	for p, off := range start {
		part := strconv.Itoa(int(p.Partition))
		parts[rawfetch.Partition{Topic: p.Topic, Partition: p.Partition}] = &ptPartition{
			p: p, topicID: r.topicID(p.Topic), next: off, sent: off,
			records:   r.deps.Metrics.Records.WithLabelValues(r.set.Link, p.Topic, part),
			rawBytes:  r.deps.Metrics.Bytes.WithLabelValues(r.set.Link, p.Topic, part),
			wireBytes: r.deps.Metrics.WireBytes.WithLabelValues(r.set.Link, p.Topic, part),
		}
	}
	s.countFrom(start)
	tr := newBatchTracer(r.deps.Tracer, r.deps.Recent, r.set.Link, r.shard, r.epoch, r.log)
	s.fetchStage = r.deps.Metrics.Stages.WithLabelValues(r.set.Link, stages.Fetch)
	// The session's own rounds: each of its partitions takes its turn at
	// the front of their leader's request, whatever other shards fetch.
	reader := r.deps.RawFetch.Reader()
	r.resumeEpochs(reader, start)
	ask := make(map[rawfetch.Partition]int64, len(parts))
	for len(parts) > 0 {
		if r.deps.pauseFetch != nil {
			select {
			case <-r.deps.pauseFetch:
			case <-ctx.Done():
				return nil
			}
		}
		clear(ask)
		for rp, pp := range parts {
			ask[rp] = pp.next
		}
		// The round's memory is reserved before it is read, of the
		// fetcher-wide budget, and the round reads no more than that, so
		// the bytes every shard holds stay within link.max_buffered_bytes
		// however many shards there are. A round asks for what all its
		// partitions could return, and takes what is free if that is
		// less, but at least one partition's worth. Each wire batch keeps
		// its share (draw) until the writer acknowledges it; the rest
		// comes back once the round is queued.
		fetch := r.deps.RawFetch
		reserved, err := s.hold.AcquireUpTo(ctx, fetch.RoundBytes(1), fetch.RoundBytes(len(ask)))
		if err != nil {
			return nil // ctx ended
		}
		s.reserved = reserved
		results, err := reader.FetchUpTo(ctx, ask, reserved)
		s.fetched = time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pass-through fetch: %w", err)
		}
		// What the response did not fill goes back now, before the round
		// waits to queue its batches: an idle or half-empty round must not
		// keep other shards from fetching.
		read := int64(0)
		for _, res := range results {
			read += int64(len(res.Records))
		}
		if read < s.reserved {
			s.hold.Release(s.reserved - read)
			s.reserved = read
		}
		retries := 0
		for rp, res := range results {
			pp := parts[rp]
			if pp == nil { // not asked: a Fetcher never answers so
				continue
			}
			if res.Retry != nil {
				retries++
				r.log.Debug("source fetch: retrying next round", "topic", rp.Topic, "partition", rp.Partition, "err", res.Retry)
			}
			stop, ok, err := s.apply(ctx, tr, pp, res)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if stop != nil {
				r.stopPartition(pp.p, stop)
				delete(parts, rp)
			}
		}
		s.hold.Release(s.reserved)
		s.reserved = 0
		if len(results) > 0 && retries == len(results) && !s.retryWait(ctx) {
			return nil
		}
	}
	return nil
}

// apply takes a partition's Result of a round: its high watermark, its
// batches queued to the stream, its next position, and the StopError its
// Err means, if any. ok is false when ctx ended before the batches were
// queued; err is a failure of the session's own (see withoutReplicated),
// or errTopicReopen.
func (s *session) apply(ctx context.Context, tr *batchTracer, pp *ptPartition, res rawfetch.Result) (stop *StopError, ok bool, err error) {
	if id := res.TopicID; id != ([16]byte{}) && len(pp.topicID) > 0 && !bytes.Equal(id[:], pp.topicID) {
		// The round read another topic of the partition's name: nothing
		// of it is taken, not even its high watermark.
		stop, err := s.r.recreatedWhileReading(pp.p, pp.topicID, id[:])
		return stop, err == nil, err
	}
	if stop := s.r.truncated(pp.p, res.Err, pp.sent); stop != nil {
		// Nothing of the round is taken: what the log holds from the
		// divergence on is not what the target has.
		return stop, true, nil
	}
	s.r.epochs(pp.p).note(res)
	if res.HighWatermark >= 0 {
		s.r.setHighWater(pp.p, res.HighWatermark) // keeps the lag right between the watcher's rounds
		s.r.noteFetched(pp.p, res.HighWatermark, res.LogStartOffset, s.fetched)
	}
	ks, err := kafkaBatches(res.Batches, pp.next)
	if err != nil {
		return &StopError{Reason: ReasonSourceUnreadable, Err: err}, true, nil
	}
	// What the round read ends below the source's high watermark; a Skip
	// carries it, as the writer checkpoints past a Skip only below it
	// (res.Next bounds it when the round did not learn it).
	hw := max(res.HighWatermark, res.Next)
	ks, skipped, err := s.withoutReplicated(ctx, pp, ks, hw)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, nil
		}
		// The source could not say which producers are Ferry's (a broker
		// away, no read access to its producer id topic): the session
		// fails and is tried again, copying nothing it cannot tell.
		return nil, false, err
	}
	if !pp.begun && len(ks) > 0 {
		if !s.startGap(ctx, pp, ks[0].Info.BaseOffset, hw) {
			return nil, false, nil
		}
	}
	for len(ks) > 0 {
		if max := s.r.set.MaxMessageBytes; max > 0 && len(ks[0].Raw) > max {
			if stop, ok := s.sealRecords(ctx, tr, pp, ks[0]); !ok || stop != nil {
				return stop, ok, nil
			}
			ks = ks[1:]
			continue
		}
		n := groupLen(ks, s.r.set.BatchMaxBytes)
		if !s.sealKafka(ctx, tr, pp, res.Records, ks[:n]) {
			return nil, false, nil
		}
		ks = ks[n:]
	}
	// What the round read past its last copied record holds nothing to
	// copy (transaction markers, aborted records, batches Ferry wrote): a
	// Skip to Next moves the checkpoint there, or a partition whose tail
	// is a marker would show a lag of one until its next record.
	if res.Err == nil && res.Next > pp.sent && (skipped == nil || skipped.GetLastOffset() < res.Next-1) {
		if skipped == nil {
			skipped = batch.Skip(pp.sent, res.Next-1, hw)
			skipped.Topic, skipped.Partition, skipped.Epoch = pp.p.Topic, pp.p.Partition, s.r.epoch
		} else {
			skipped.LastOffset = res.Next - 1
		}
	}
	if skipped != nil {
		select {
		case s.out <- queued{b: skipped}:
			pp.sent, pp.begun = skipped.GetLastOffset()+1, true
			s.countedTo(pp.p, pp.sent, 0)
		case <-ctx.Done():
			return nil, false, nil
		}
	}
	pp.next = res.Next
	switch {
	case res.Err == nil:
		return nil, true, nil
	case errors.Is(res.Err, rawfetch.ErrOffsetOutOfRange):
		// Retention (or DeleteRecords) passed the position while the
		// partition was being read.
		return &StopError{Reason: ReasonOutOfRange, Err: fmt.Errorf("while reading: %w", res.Err)}, true, nil
	default:
		return &StopError{Reason: ReasonSourceUnreadable, Err: res.Err}, true, nil
	}
}

// startGap queues a Skip over what lies between the partition's start in
// the session and its first batch to copy, base, when they differ: a
// cleaned compacted head, aborted records and transaction markers, or
// batches left out as copied from the target. The writer's offset index
// then starts where the copy started rather than at the first copied
// batch, so every source offset from the start translates (a group
// committed at 111 on a compacted topic whose first batch is at 220 goes
// to that batch's target offset; without the Skip it was "before the
// offset index"). Once per partition and session: later gaps lie between
// index entries, which translation already crosses. False if ctx ended
// first.
func (s *session) startGap(ctx context.Context, pp *ptPartition, base, hw int64) bool {
	pp.begun = true
	if base <= pp.sent {
		return true
	}
	skip := batch.Skip(pp.sent, base-1, hw)
	skip.Topic, skip.Partition, skip.Epoch = pp.p.Topic, pp.p.Partition, s.r.epoch
	select {
	case s.out <- queued{b: skip}:
		pp.sent = base
		s.countedTo(pp.p, pp.sent, 0)
		return true
	case <-ctx.Done():
		return false
	}
}

// draw takes a wire batch's share of n bytes from what its round
// reserved: all of n while the reservation lasts (a round can read more
// than it reserved: a first batch above the partition limit comes whole),
// then what is left, then nothing (send takes the bytes of such a batch).
func (s *session) draw(n int) int64 {
	d := min(int64(n), s.reserved)
	s.reserved -= d
	return d
}

// kafkaBatches parses a round's batches of a partition read from offset
// from, leaving out those with nothing to copy: batches compaction emptied
// (kept by Kafka for their producer state) and any ending before from.
func kafkaBatches(raws [][]byte, from int64) ([]batch.KafkaBatch, error) {
	ks := make([]batch.KafkaBatch, 0, len(raws))
	for _, raw := range raws {
		info, err := recordbatch.Parse(raw)
		if err != nil { // rawfetch checked them whole: a bug, not the source
			return nil, fmt.Errorf("fetched batch: %w", err)
		}
		k := batch.KafkaBatch{Raw: raw, Info: info}
		if info.NumRecords > 0 && k.LastOffset() >= from {
			ks = append(ks, k)
		}
	}
	return ks, nil
}

// withoutReplicated leaves out of ks the batches a Ferry writer copied
// into the source from this link's target cluster (Deps.Provenance; none
// without it), counted: copying them would loop. What a writer copied from
// another cluster (A→B read by B→C) is copied on. Left-out batches before
// or between the others need nothing: a wire batch's offsets may have
// gaps. Those after the last one left in become a Skip wire batch to send
// after the others, so the writer checkpoints past them: a partition
// holding only copied records otherwise stays behind.
func (s *session) withoutReplicated(ctx context.Context, pp *ptPartition, ks []batch.KafkaBatch, hw int64) ([]batch.KafkaBatch, *ferryv1.Batch, error) {
	view := s.r.deps.Provenance
	if view == nil || len(ks) == 0 {
		return ks, nil, nil
	}
	ids := make([]int64, 0, len(ks))
	for _, k := range ks {
		ids = append(ids, k.Info.ProducerID)
	}
	origins, err := view.Origins(ctx, ids, s.targetCluster)
	if err != nil {
		return nil, nil, fmt.Errorf("which source producers are Ferry writers: %w", err)
	}
	kept := ks[:0:0]
	skippedRecords, unattributed := 0, 0
	var tail *batch.KafkaBatch // the last batch, when left out
	for i := range ks {
		switch origins[ks[i].Info.ProducerID] {
		case provenance.CopiedFrom:
			skippedRecords += int(ks[i].Info.NumRecords)
			tail = &ks[i]
			continue
		case provenance.Unattributed:
			// An old writer's entry: which cluster it copied from is
			// unknown, and a loss is worse than a loop (which upgrading
			// the writers ends), so it is copied, loudly.
			unattributed += int(ks[i].Info.NumRecords)
		}
		kept, tail = append(kept, ks[i]), nil
	}
	if unattributed > 0 {
		s.r.deps.Metrics.Unattributed.WithLabelValues(s.r.set.Link, pp.p.Topic, strconv.Itoa(int(pp.p.Partition))).Add(float64(unattributed))
		s.r.warnUnattributed.Do(func() {
			s.r.log.Warn("copying batches a Ferry writer produced into the source whose __ferry_producers entry names no source cluster (a writer older than the field): if they came from this link's target they loop until all writers are upgraded",
				"topic", pp.p.Topic, "partition", pp.p.Partition)
		})
	}
	if skippedRecords == 0 {
		return ks, nil, nil
	}
	s.r.deps.Metrics.Replicated.WithLabelValues(s.r.set.Link, pp.p.Topic, strconv.Itoa(int(pp.p.Partition))).Add(float64(skippedRecords))
	if tail == nil {
		return kept, nil, nil
	}
	first := pp.next
	if len(kept) > 0 {
		first = max(first, kept[len(kept)-1].LastOffset()+1)
	}
	skip := batch.Skip(first, tail.LastOffset(), hw)
	skip.Topic, skip.Partition, skip.Epoch = pp.p.Topic, pp.p.Partition, s.r.epoch
	return kept, skip, nil
}

// sealRecords sends the records of Kafka batch k from the partition's
// position on in Ferry's own format, cut at BatchMaxBytes: k is larger than
// the writers take. A record that alone is larger stops the partition
// there, after what comes before it is queued. ok is false when ctx ended.
func (s *session) sealRecords(ctx context.Context, tr *batchTracer, pp *ptPartition, k batch.KafkaBatch) (stop *StopError, ok bool) {
	r := s.r
	recs, err := recordbatch.Records(k.Raw, maxTraceDecode)
	if err != nil {
		return &StopError{Reason: ReasonSourceUnreadable, Err: fmt.Errorf("Kafka batch at %d above writers.max_message_bytes: %w", k.Info.BaseOffset, err)}, true
	}
	var enc batch.Encoder
	flush := func() bool {
		cut := tr.cut()
		b := r.deps.Codecs.Seal(&enc, r.set.Codec)
		b.Topic, b.Partition, b.Epoch = pp.p.Topic, pp.p.Partition, r.epoch
		s.stamp(b, k.Info.MaxTimestamp)
		span := tr.seal(ctx, b, enc.Len(), cut)
		pp.records.Add(float64(enc.Count()))
		pp.rawBytes.Add(float64(enc.Len()))
		pp.wireBytes.Add(float64(len(b.Payload)))
		enc.Reset()
		select {
		case s.out <- queued{b, span, s.draw(len(b.Payload))}:
			pp.sent = b.LastOffset + 1
			s.countedTo(pp.p, pp.sent, b.RecordCount)
			return true
		case <-ctx.Done():
			return false
		}
	}
	for _, rec := range recs {
		off := k.Info.BaseOffset + int64(rec.OffsetDelta)
		if off < pp.next {
			continue
		}
		size := recordbatch.RecordSize(rec)
		if size > r.set.MaxMessageBytes {
			if enc.Count() > 0 && !flush() {
				return nil, false
			}
			return r.tooLarge(pp.p, off, size), true
		}
		if enc.Count() > 0 && enc.Len()+size > r.set.BatchMaxBytes {
			if !flush() {
				return nil, false
			}
		}
		if r.deps.Tracer != nil {
			tr.recordKafka(ctx, pp.p, off, rec)
		}
		enc.Begin(off, rec.Timestamp, rec.Key, rec.Value, len(rec.Headers))
		for _, h := range rec.Headers {
			enc.Header([]byte(h.Key), h.Value)
		}
	}
	if enc.Count() > 0 && !flush() {
		return nil, false
	}
	return nil, true
}

// groupLen is how many of the leading batches make one wire batch: as many
// as fit in max bytes, and at least one, so a larger batch travels alone.
func groupLen(ks []batch.KafkaBatch, max int) int {
	n, size := 1, len(ks[0].Raw)
	for n < len(ks) && size+len(ks[n].Raw) <= max {
		size += len(ks[n].Raw)
		n++
	}
	return n
}

// sealKafka seals Kafka batches of pp into a wire batch and queues it for
// send; false if ctx ended first. The wire batch starts at the partition's
// position, inside its first Kafka batch when the position is (a resume
// from a checkpoint in the middle of a batch), or at the first batch's base
// offset when the position is in a gap before it (markers, aborted
// records, compaction): the writer refuses a first offset outside the
// first batch.
func (s *session) sealKafka(ctx context.Context, tr *batchTracer, pp *ptPartition, records []byte, ks []batch.KafkaBatch) bool {
	r := s.r
	first := max(pp.next, ks[0].Info.BaseOffset)
	raw := contiguous(records, ks)
	if raw == nil {
		// Batches apart in memory (some left out between them, or
		// converted from legacy messages) are copied into one.
		size := 0
		for _, k := range ks {
			size += len(k.Raw)
		}
		raw = make([]byte, 0, size)
		for _, k := range ks {
			raw = append(raw, k.Raw...)
		}
	}
	s.traceRecords(ctx, tr, pp.p, ks, first)
	cut := tr.cut()
	b := r.deps.Codecs.SealKafka(raw, ks, first, r.set.Codec)
	b.Topic, b.Partition, b.Epoch = pp.p.Topic, pp.p.Partition, r.epoch
	s.stamp(b, newest(ks))
	span := tr.seal(ctx, b, len(raw), cut)
	pp.records.Add(float64(b.RecordCount))
	pp.rawBytes.Add(float64(len(raw)))
	pp.wireBytes.Add(float64(len(b.Payload)))
	select {
	case s.out <- queued{b, span, s.draw(len(raw))}:
		pp.sent = b.LastOffset + 1
		s.countedTo(pp.p, pp.sent, b.RecordCount)
		return true
	case <-ctx.Done():
		return false
	}
}

// stamp puts the fetch time of the round that read b on it, for the
// writer's transit stage, and observes b's fetch stage: from newest, the
// newest source timestamp of its records in milliseconds (the broker's
// append time under LogAppendTime, else the producer's CreateTime; < 0:
// none), to the fetch. Once per wire batch: per record would cost the hot
// path for nothing an operator reads. A CreateTime ahead of the fetcher's
// clock counts as 0, not as a negative latency.
func (s *session) stamp(b *ferryv1.Batch, newest int64) {
	b.FetchedUnixMicros = s.fetched.UnixMicro()
	if newest >= 0 {
		s.fetchStage.Observe(max(0, s.fetched.Sub(time.UnixMilli(newest)).Seconds()))
	}
}

// newest is the newest source timestamp of ks: Kafka keeps each batch's in
// its header (MaxTimestamp), so nothing is decoded.
func newest(ks []batch.KafkaBatch) int64 {
	n := int64(-1)
	for _, k := range ks {
		n = max(n, k.Info.MaxTimestamp)
	}
	return n
}

// contiguous returns ks as one slice of records, the fetch response's
// bytes of their partition, when they follow each other there from a batch
// boundary on (consecutive batches of the response, none left out between
// them), or nil. The wire batch then aliases the fetch response instead of
// copying it: the response stays in memory only while the batch waits for
// the sender (outSlots), since gRPC copies what it sends, and a copy of
// every fetched byte was half the fetcher's allocations (2026-12-01 heap
// profile). Only addresses of records' own bytes are compared, so the
// result is always a slice of records.
func contiguous(records []byte, ks []batch.KafkaBatch) []byte {
	at := 0
	for at < len(records) && &records[at] != &ks[0].Raw[0] {
		info, err := recordbatch.Parse(records[at:])
		if err != nil {
			return nil // a legacy message set, or bytes cut short
		}
		at += info.Size()
	}
	end := at
	for _, k := range ks {
		if len(k.Raw) == 0 || end+len(k.Raw) > len(records) || &records[end] != &k.Raw[0] {
			return nil
		}
		end += len(k.Raw)
	}
	return records[at:end:end]
}

// traceRecords gives the batch tracer the records of a wire batch from
// first on, so sampled records get their span and the batch its links. Only with a tracer:
// without one nothing is decoded, and with one only the batches the probe
// picks (tracing.RecordProbe: every batch of a partition whose records
// carry trace contexts, few of one whose records carry none). A batch that
// does not decode is only left out of the trace; the writer checks it.
func (s *session) traceRecords(ctx context.Context, tr *batchTracer, p discovery.Partition, ks []batch.KafkaBatch, first int64) {
	if s.r.deps.Tracer == nil {
		return
	}
	tr.read()
	for _, k := range ks {
		if !s.probe.Look(p.Topic, p.Partition) {
			continue
		}
		recs, err := recordbatch.Records(k.Raw, maxTraceDecode)
		if err != nil {
			s.r.log.Debug("batch not traced record by record", "topic", p.Topic, "partition", p.Partition, "base_offset", k.Info.BaseOffset, "err", err)
			continue
		}
		traced := false
		for _, rec := range recs {
			traced = traced || carriesTraceparent(rec.Headers)
			if off := k.Info.BaseOffset + int64(rec.OffsetDelta); off >= first {
				tr.recordKafka(ctx, p, off, rec)
			}
		}
		s.probe.Saw(p.Topic, p.Partition, traced)
	}
}

// retryWait follows a round in which every partition asked for a retry
// (leaders moving, a broker away): such a round may end at once, and the
// loop must not spin on it. It waits MinBackoff to twice that, jittered;
// false if ctx ended first.
func (s *session) retryWait(ctx context.Context) bool {
	d := s.r.set.MinBackoff
	t := time.NewTimer(d + rand.N(d+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
