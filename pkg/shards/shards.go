// Package shards places source partitions in a link's fixed set of shards.
// A shard is the unit of ownership (one lease, one stream, one target
// transactional id), so every tier and tool must place a partition alike.
package shards

import (
	"hash/fnv"
	"strconv"
)

// Default is a link's shard count when its configuration sets none, on
// both tiers (fetcher link.shards, writer links[].shards): they must agree.
const Default = 8

// Of returns the shard, in [0, n), of a topic's partition.
func Of(topic string, partition int32, n int) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(int(partition))))
	return int(h.Sum32() % uint32(n))
}
