package servertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/ferry-replicator/ferry/pkg/recordbatch"
)

// What the target holds of topic orders, read as a consumer would.

// PartitionRaw fetches the data batches of orders/partition raw from the
// target, with their headers.
func PartitionRaw(t *testing.T, cluster *kfake.Cluster, partition int32) ([]recordbatch.Info, [][]byte) {
	t.Helper()
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), 12) // topics by name
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.MaxVersions(v))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 100, 16<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "orders"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = partition, 16<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	rpart := resp.Topics[0].Partitions[0]
	if rpart.ErrorCode != 0 {
		t.Fatalf("fetch orders/%d: error %d", partition, rpart.ErrorCode)
	}
	raws, _, err := recordbatch.Split(rpart.RecordBatches)
	if err != nil {
		t.Fatal(err)
	}
	var (
		infos []recordbatch.Info
		data  [][]byte
	)
	for _, raw := range raws {
		info, err := recordbatch.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Control() { // exactly-once: the transactions' markers
			infos, data = append(infos, info), append(data, raw)
		}
	}
	return infos, data
}

// PartitionValues are the values of orders/partition in order.
func PartitionValues(t *testing.T, cluster *kfake.Cluster, partition int32) []string {
	t.Helper()
	_, raws := PartitionRaw(t, cluster, partition)
	var out []string
	for _, raw := range raws {
		recs, err := recordbatch.Records(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
	}
	return out
}

// Vals are the values SourceBatch gives the source offsets [from, to).
func Vals(from, to int64) []string {
	var out []string
	for o := from; o < to; o++ {
		out = append(out, fmt.Sprintf("v%d", o))
	}
	return out
}

// CopiedRecord is a record of the target: its offset there, and the
// source offset its value ("v<offset>") names.
type CopiedRecord struct{ Source, Target int64 }

// CopiedRecords reads what a read_committed consumer of orders/partition
// sees on the target, up to its last stable offset.
func CopiedRecords(ctx context.Context, t *testing.T, cluster *kfake.Cluster, partition int32) []CopiedRecord {
	t.Helper()
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	admin, err := kgo.NewClient(seeds)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListCommittedOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("orders", partition)
	cl, err := kgo.NewClient(seeds, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []CopiedRecord
	for read := int64(0); read < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading orders/%d up to %d: %v", partition, end.Offset, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			read = r.Offset + 1
			if r.Attrs.IsControl() || r.Offset >= end.Offset {
				return
			}
			src, err := strconv.ParseInt(strings.TrimPrefix(string(r.Value), "v"), 10, 64)
			if err != nil {
				t.Fatalf("orders/%d at %d holds %q", partition, r.Offset, r.Value)
			}
			out = append(out, CopiedRecord{Source: src, Target: r.Offset})
		})
	}
	return out
}

// TargetGroup is the group's committed offset and metadata on the
// target's orders/0, -1 when none.
func TargetGroup(t *testing.T, cluster *kfake.Cluster, group string) (int64, string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	os, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := os.Lookup("orders", 0)
	if !ok || o.At < 0 {
		return -1, ""
	}
	return o.At, o.Metadata
}

// CommitOnTarget commits group's offset on orders/0 of the target with
// metadata, as a consumer (or Ferry's group sync) would.
func CommitOnTarget(ctx context.Context, t *testing.T, cluster *kfake.Cluster, group string, offset int64, metadata string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "orders", Partition: 0, At: offset, LeaderEpoch: -1, Metadata: metadata})
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit group %s at %d: %v", group, offset, err)
	}
}
