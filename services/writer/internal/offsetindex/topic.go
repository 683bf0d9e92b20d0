package offsetindex

import (
	"strconv"
	"time"
)

// Defaults of the writer's offset_index settings.
const (
	DefaultTopic     = "__ferry_offset_index"
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultFlushInterval is offset_index.flush_interval's default: a
	// shard copying at full speed writes its index partition once every
	// seven or so rounds instead of in each.
	DefaultFlushInterval = time.Second
	// MaxFlushInterval bounds it: the entries a checkpoint carries stay
	// few.
	MaxFlushInterval = time.Minute
	// MinRetention is the shortest offset_index.retention: translation
	// needs the index for as long as consumers may lag on the source.
	MinRetention = time.Hour
)

// Topic is the index topic as the writer produces to it.
type Topic struct {
	Name string
	// Partitions is the topic's partition count as the target reports it:
	// PartitionOf depends on it, so the topic must never grow.
	Partitions int32
	// FlushInterval is how long a partition's index entries may ride in
	// its checkpoints before a round writes them here (0: every round).
	FlushInterval time.Duration
	// Retention is offset_index.retention, what the writer creates the
	// topic with: source topics that keep records longer are named as
	// ones the index cannot cover (0: not compared).
	Retention time.Duration
}

// PartitionOf is the partition of k's index records.
func (t Topic) PartitionOf(k Key) int32 { return PartitionOf(k, t.Partitions) }

// Configs are the configs the writer creates the index topic with. Time
// retention, not compaction: a partition's records are many (one a round)
// and all needed, and they are needed for as long as the source keeps the
// offsets they translate, which the operator sets as retention (at least
// the longest source retention).
func Configs(retention time.Duration) map[string]string {
	return map[string]string{
		"cleanup.policy": "delete",
		"retention.ms":   strconv.FormatInt(retention.Milliseconds(), 10),
	}
}
