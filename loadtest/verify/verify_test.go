package verify

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCompareCountsEachAnomaly(t *testing.T) {
	src := []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}}
	tests := []struct {
		name string
		dst  []rec
		want Result
	}{
		{"perfect", []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4}},
		{"missing", []rec{{1, 10, 0}, {2, 20, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 3, Missing: 1}},
		{"duplicate after restart", []rec{{1, 10, 0}, {2, 20, 1}, {2, 20, 7}, {3, 30, 8}, {4, 40, 9}}, Result{Produced: 4, Replicated: 5, Duplicates: 1,
			FirstDuplicates: []Duplicate{{Topic: "t", Partition: 3, Offset: 7, First: 1}}}},
		{"reordered", []rec{{1, 10, 0}, {3, 30, 0}, {2, 20, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4, Reordered: 1}},
		{"corrupt value", []rec{{1, 10, 0}, {9, 20, 0}, {3, 30, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4, Corrupt: 1, Missing: 1}},
		{"leaked aborted", []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}, {5, 50, 0}}, Result{Produced: 4, Replicated: 5, Corrupt: 1, Leaked: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			compare(&got, "t", 3, src, tt.dst)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got.OK() != (tt.name == "perfect") {
				t.Fatalf("OK() = %v", got.OK())
			}
		})
	}
}

// Keep filters pick each side's records: a source topic that another link
// writes into too is compared only by its own records, and a target holding
// other records is compared only by the copied ones. Without the filters
// the same clusters compare as corrupt and missing.
func TestCompareKeepsOnlyTheRecordsAskedFor(t *testing.T) {
	ctx := context.Background()
	var addrs [2][]string
	for i := range addrs {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		addrs[i] = c.ListenAddrs()
	}
	produce := func(addrs []string, recs ...*kgo.Record) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("t"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	other := []kgo.RecordHeader{{Key: "origin", Value: []byte("other")}}
	// Timestamps are set: the digest compares them too.
	own := func(i int) *kgo.Record {
		return &kgo.Record{Key: []byte{byte(i)}, Value: []byte("own"), Timestamp: time.UnixMilli(int64(1000 + i))}
	}
	foreign := func(i int) *kgo.Record {
		return &kgo.Record{Key: []byte{byte(i)}, Value: []byte("x"), Headers: other, Timestamp: time.UnixMilli(int64(1000 + i))}
	}
	produce(addrs[0], own(1), foreign(2), own(3)) // the source: own records and another link's
	produce(addrs[1], foreign(9), own(1), own(3)) // the target: its own record, then the copy
	isOther := func(r *kgo.Record) bool { return len(r.Headers) > 0 }
	pair := Pair{Source: "t", Target: "t",
		KeepSource: func(r *kgo.Record) bool { return !isOther(r) },
		KeepTarget: func(r *kgo.Record) bool { return !isOther(r) }}
	res, err := Compare(ctx, addrs[0], addrs[1], []Pair{pair})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Produced != 2 || res.Replicated != 2 {
		t.Fatalf("with the filters: %+v, want an exact copy of 2", res)
	}
	res, err = Compare(ctx, addrs[0], addrs[1], []Pair{{Source: "t", Target: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() {
		t.Fatalf("without the filters: %+v, want anomalies", res)
	}
}
