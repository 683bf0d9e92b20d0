package server

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/refusal"
)

// StoppedPartition is a partition the writer refused for good (package
// refusal): its fetcher stopped it, and it stays stopped until an
// operator acts. The fetcher's status says so too; this is the target
// side's view of it, for whoever watches the writers.
type StoppedPartition struct {
	Link      string `json:"link"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Reason is the refusal's label in ferry_writer_rejected_total
	// (record_too_large, batch_too_large, target_refused,
	// checkpoint_unverified); Error says it in words.
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	Since  time.Time `json:"since"`
}

// stoppedTable keeps the partitions the writer refused, until a stream
// opens one again (its fetcher was restarted, the cause fixed). It holds
// only partitions of streams the writer admitted and opened, so its size
// is bounded by the links' topics.
type stoppedTable struct {
	mu    sync.Mutex
	parts map[stoppedKey]StoppedPartition
}

type stoppedKey struct {
	link  string
	topic string
	part  int32
}

// note records the partition err refuses, if it is a refusal.
func (t *stoppedTable) note(link string, err error) {
	r, ok := refusal.From(err)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parts == nil {
		t.parts = map[stoppedKey]StoppedPartition{}
	}
	t.parts[stoppedKey{link, r.Topic, r.Partition}] = StoppedPartition{
		Link: link, Topic: r.Topic, Partition: r.Partition, Reason: reasonOf(err), Error: r.Error(), Since: time.Now(),
	}
}

// reopened forgets the partitions an Open of link lists.
func (t *stoppedTable) reopened(link string, parts []*ferryv1.TopicPartition) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.parts) == 0 {
		return
	}
	for _, p := range parts {
		delete(t.parts, stoppedKey{link, p.GetTopic(), p.GetPartition()})
	}
}

// Stopped lists the partitions the writer refused, by link, topic and
// partition.
func (s *Server) Stopped() []StoppedPartition {
	t := &s.stops
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]StoppedPartition, 0, len(t.parts))
	for _, p := range t.parts {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b StoppedPartition) int {
		return strings.Compare(a.Link+"\x00"+a.Topic, b.Link+"\x00"+b.Topic)*2 + cmp.Compare(a.Partition, b.Partition)
	})
	return out
}
