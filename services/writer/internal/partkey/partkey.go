// Package partkey is how the writer's own topics name a source partition:
// the checkpoint, offset index and heartbeat topics all key their records
// by link/topic/partition and place them by one hash, so a source
// partition's checkpoint and index records land at the same partition
// number of their topics (a round's transaction then adds at most one
// index partition per checkpoint partition).
package partkey

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Key identifies a source partition within a link.
type Key struct {
	Link      string
	Topic     string
	Partition int32
}

// Partition is a source partition within one link: how a shard's
// stream, its translator and its group sync name the partitions it copies.
type Partition struct {
	Topic     string
	Partition int32
}

// String is the record key: link/topic/partition. Neither link names nor
// topic names can hold a slash.
func (k Key) String() string {
	return k.Link + "/" + k.Topic + "/" + strconv.Itoa(int(k.Partition))
}

// Parse reads a record key, taking only the one spelling String gives.
// The topics are compacted by record key, so a partition's key spelt
// otherwise ("l/t/07", "l/t/+7") would be kept beside the writer's own
// records, survive the tombstone an operator writes to forget the
// partition, and come back at the next start.
func Parse(s string) (Key, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return Key{}, false
	}
	p, err := strconv.ParseInt(parts[2], 10, 32)
	if err != nil || p < 0 {
		return Key{}, false
	}
	k := Key{Link: parts[0], Topic: parts[1], Partition: int32(p)}
	return k, k.String() == s
}

// PartitionOf is the partition, of a topic with partitions partitions,
// that k's records go to.
func PartitionOf(k Key, partitions int32) int32 { return Place(k.String(), partitions) }

// Place is the partition of the records of a record key: FNV-1a of the
// key. The checkpoint topic's other records (link control records) are
// placed by it too.
func Place(key string, partitions int32) int32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % uint32(partitions))
}
