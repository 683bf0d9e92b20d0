package server

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/recordbatch"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/server/servertest"
)

// The writer under test and the fetcher's side of its stream are package
// servertest's, which the control plane's tests (package control) share;
// the server's tests call them by these names.

const (
	cpTopic       = servertest.CheckpointTopic
	indexTopic    = servertest.IndexTopic
	transactional = servertest.Transactional
)

var (
	openShard         = servertest.OpenShard
	inShard           = servertest.InShard
	closeStream       = servertest.CloseStream
	sendTo            = servertest.SendTo
	awaitAck          = servertest.AwaitAck
	sendToPartition   = servertest.SendToPartition
	mustSend          = servertest.MustSend
	wantRefusal       = servertest.WantRefusal
	bothModes         = servertest.BothModes
	sourceBatch       = servertest.SourceBatch
	appendRecord      = servertest.AppendRecord
	wireKafka         = servertest.WireKafka
	wireKafkaCodec    = servertest.WireKafkaCodec
	copyWithGaps      = servertest.CopyWithGaps
	vals              = servertest.Vals
	groupCommitterOn  = servertest.GroupCommitterOn
	groupStateCluster = servertest.GroupStateCluster
	groupOffsets      = servertest.GroupOffsets
	standsFor         = servertest.StandsFor
)

// rejected is ferry_writer_rejected_total of the link and reason.
func (w *testWriter) rejected(t *testing.T, link, reason string) float64 {
	t.Helper()
	return w.h.Rejected(t, link, reason)
}

// produceCheckpoint writes rec to the checkpoint topic as anyone allowed
// to produce to it can, waits until the writer's view has read it, and
// returns its offset.
func (w *testWriter) produceCheckpoint(ctx context.Context, t *testing.T, rec *kgo.Record) int64 {
	t.Helper()
	return w.h.ProduceCheckpoint(ctx, t, rec)
}

// partitionRaw fetches the data batches of orders/partition raw from the
// target, with their headers.
func partitionRaw(t *testing.T, w *testWriter, partition int32) ([]recordbatch.Info, [][]byte) {
	t.Helper()
	return servertest.PartitionRaw(t, w.cluster, partition)
}

// partitionValues are the values of orders/partition in order.
func partitionValues(t *testing.T, w *testWriter, partition int32) []string {
	t.Helper()
	return servertest.PartitionValues(t, w.cluster, partition)
}

// copiedRecord is a record of the target: its offset there, and the source
// offset its value ("v<offset>") names.
type copiedRecord struct{ source, target int64 }

// copiedRecords reads what a read_committed consumer of orders/partition
// sees on the target, up to its last stable offset.
func copiedRecords(ctx context.Context, t *testing.T, w *testWriter, partition int32) []copiedRecord {
	t.Helper()
	var out []copiedRecord
	for _, c := range servertest.CopiedRecords(ctx, t, w.cluster, partition) {
		out = append(out, copiedRecord{source: c.Source, target: c.Target})
	}
	return out
}

// targetGroup is the group's committed offset and metadata on the
// target's orders/0, -1 when none.
func (w *testWriter) targetGroup(t *testing.T, group string) (int64, string) {
	t.Helper()
	return servertest.TargetGroup(t, w.cluster, group)
}

// commitOnTarget commits group's offset on orders/0 of the target with
// metadata, as a consumer (or Ferry's group sync) would.
func commitOnTarget(ctx context.Context, t *testing.T, w *testWriter, group string, offset int64, metadata string) {
	t.Helper()
	servertest.CommitOnTarget(ctx, t, w.cluster, group, offset, metadata)
}

// runGroupSync runs s's group syncer until the test ends.
func runGroupSync(t *testing.T, s *Server) { servertest.RunGroupSync(t, s.RunGroupSync) }

// groupOf is the group's line in the writer's /status, if any.
func groupOf(w *testWriter, group string) (groupsyncer.Status, bool) {
	return servertest.GroupOf(w.srv.Groups, group)
}

// syncUntil sends offsets, as a fetcher does each interval, until every
// group's status satisfies ok (servertest.SyncUntil).
func syncUntil(t *testing.T, w *testWriter, stream ferryv1.ReplicationService_ReplicateClient, offsets map[string]int64, what string, ok func(groupsyncer.Status) bool) {
	t.Helper()
	servertest.SyncUntil(t, w.srv.Groups, stream, offsets, what, ok)
}

// startTLSWriter is a writer of link east (at-least-once) with TLS as the
// app wires it (servertest.PKI.Config): its port admits pki's fetcher and
// operator, and Replicate only the fetcher.
func startTLSWriter(t *testing.T, pki servertest.PKI) *testWriter {
	t.Helper()
	cfg := pki.Config(t, nil)
	return startWriterOn(t, nil, passthroughLinks(t, false), func(o *Options) {
		o.ReplicateIDs = tlsconfig.NewIDs([]string{servertest.FetcherID})
	}, cfg.Store, cfg.ServerOptions, cfg.Creds)
}
