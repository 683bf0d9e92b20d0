// Package groups reads the committed offsets of the source cluster's
// consumer groups that a link syncs (link.groups), for the writers to
// translate and commit on the target (pkg/groupsync).
//
// A Reader answers one snapshot per call: the groups selected by name and
// kind, and for each the committed offsets of the partitions the link
// copies. Only plain consumer groups are read: classic ones and KIP-848
// consumer groups (protocol type "consumer"), and "simple" groups that
// hold offsets without members (protocol type "", consumers using
// assign()). Share groups have no committed offsets, and Kafka Streams'
// streams groups (KIP-1071), Connect's groups and anything else keep state
// that is not consistent across clusters: they are left out and counted.
package groups

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
)

// Admin is the part of sarama's ClusterAdmin a Reader needs.
type Admin interface {
	DescribeCluster() (brokers []*sarama.Broker, controllerID int32, err error)
	ListConsumerGroups() (map[string]string, error)
	ListConsumerGroupOffsets(group string, topicPartitions map[string][]int32) (*sarama.OffsetFetchResponse, error)
}

// Partition names a source partition.
type Partition struct {
	Topic     string
	Partition int32
}

// Snapshot is what one read found.
type Snapshot struct {
	// At is when the read began: every offset in it was committed by then.
	At time.Time
	// Offsets are, per group, the committed offset (the next record the
	// group reads) of each partition the link copies. A group with none
	// of them committed is absent.
	Offsets map[string]map[Partition]int64
	// Skipped counts the groups left out, by reason: kind (not a plain
	// consumer group), limit (over Options.Max), error (its offsets could
	// not be read this time).
	Skipped map[string]int
	// Errors holds, for the groups skipped for an error, what went wrong.
	Errors map[string]error
}

// Options configure a Reader.
type Options struct {
	// Include and Exclude select groups by name, anchored regular
	// expressions as for topics.
	Include, Exclude []string
	// Max bounds the groups read per snapshot; the rest (in name order)
	// are skipped and counted, so a cluster with a runaway number of
	// groups costs a bounded read.
	Max int
}

// Client is the part of the sarama client behind the Admin a Reader
// needs: the brokers it lists groups on.
type Client interface {
	Brokers() []*sarama.Broker
	RefreshMetadata(topics ...string) error
}

// Reader reads snapshots from one source cluster.
type Reader struct {
	admin  Admin
	client Client
	sel    discovery.Selector
	max    int
}

// NewReader checks opts and returns a Reader using admin, built on client.
func NewReader(admin Admin, client Client, opts Options) (*Reader, error) {
	sel, err := discovery.NewSelector(opts.Include, opts.Exclude)
	if err != nil {
		return nil, fmt.Errorf("link.groups: %w", err)
	}
	if opts.Max <= 0 {
		return nil, errors.New("link.groups.max: must be positive")
	}
	return &Reader{admin: admin, client: client, sel: sel, max: opts.Max}, nil
}

// syncable reports whether a group of this protocol type holds offsets
// that mean the same on another cluster once translated.
func syncable(protocolType string) bool {
	return protocolType == "consumer" || protocolType == ""
}

// Read lists the groups and reads the offsets each has committed on
// copied, the partitions the link copies. A failure to list fails the
// read; a failure for one group skips that group only.
func (r *Reader) Read(copied func(Partition) bool) (Snapshot, error) {
	snap := Snapshot{At: time.Now(), Offsets: map[string]map[Partition]int64{}, Skipped: map[string]int{}, Errors: map[string]error{}}
	if err := r.knowEveryBroker(); err != nil {
		return Snapshot{}, err
	}
	listed, err := r.admin.ListConsumerGroups()
	if err != nil {
		return Snapshot{}, fmt.Errorf("list source groups: %w", err)
	}
	names := make([]string, 0, len(listed))
	for name, kind := range listed {
		if !r.sel.Match(name) {
			continue
		}
		if !syncable(kind) {
			snap.Skipped["kind"]++
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	if len(names) > r.max {
		snap.Skipped["limit"] += len(names) - r.max
		names = names[:r.max]
	}
	for _, name := range names {
		offsets, err := r.group(name, copied)
		if err != nil {
			snap.Skipped["error"]++
			snap.Errors[name] = err
			continue
		}
		if len(offsets) > 0 {
			snap.Offsets[name] = offsets
		}
	}
	return snap, nil
}

// knowEveryBroker makes sure the client has every broker the cluster
// lists. sarama's ListConsumerGroups asks only the brokers its client has
// registered, and the client drops a broker whose metadata request failed
// (a network cut, a broker restart) until a metadata refresh succeeds: in
// that window the list misses the groups that broker coordinates, without
// an error, and they would silently stop being synced.
func (r *Reader) knowEveryBroker() error {
	live, _, err := r.admin.DescribeCluster()
	if err != nil {
		return fmt.Errorf("describe source cluster: %w", err)
	}
	missing := r.unknown(live)
	if len(missing) == 0 {
		return nil
	}
	if err := r.client.RefreshMetadata(); err != nil {
		return fmt.Errorf("source brokers %v unknown to the client: refresh metadata: %w", missing, err)
	}
	if missing = r.unknown(live); len(missing) > 0 {
		return fmt.Errorf("source brokers %v unknown to the client after a metadata refresh", missing)
	}
	return nil
}

// unknown returns the ids of brokers in live the client has not registered.
func (r *Reader) unknown(live []*sarama.Broker) []int32 {
	known := map[int32]bool{}
	for _, b := range r.client.Brokers() {
		known[b.ID()] = true
	}
	var out []int32
	for _, b := range live {
		if !known[b.ID()] {
			out = append(out, b.ID())
		}
	}
	slices.Sort(out)
	return out
}

// group reads one group's committed offsets of copied partitions, leaving
// out those Ferry itself committed (groupsync.IsFerry).
func (r *Reader) group(name string, copied func(Partition) bool) (map[Partition]int64, error) {
	resp, err := r.admin.ListConsumerGroupOffsets(name, nil)
	if err != nil {
		return nil, fmt.Errorf("offsets of group %q: %w", name, err)
	}
	out := map[Partition]int64{}
	for topic, parts := range resp.Blocks {
		for p, b := range parts {
			tp := Partition{Topic: topic, Partition: p}
			if b == nil || !copied(tp) {
				continue
			}
			if !errors.Is(b.Err, sarama.ErrNoError) {
				return nil, fmt.Errorf("offset of group %q on %s/%d: %w", name, topic, p, b.Err)
			}
			if b.Offset < 0 || groupsync.IsFerry(b.Metadata) {
				continue
			}
			out[tp] = b.Offset
		}
	}
	return out, nil
}
