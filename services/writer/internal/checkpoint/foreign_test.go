package checkpoint

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Records with keys that are not Ferry's (another tool writing the topic,
// or someone flooding it) are ignored, and logged at most once per
// foreignLogEvery with the count of those left out, so they cannot flood
// the writer's log.
func TestForeignKeysLoggedAtMostOncePerInterval(t *testing.T) {
	var logs bytes.Buffer
	s := &Store{log: slog.New(slog.NewTextHandler(&logs, nil)), cps: map[Key]*entry{}, read: make([]int64, 1)}
	s.cond = sync.NewCond(&s.mu)
	for i := range 100 {
		s.apply(0, &sarama.ConsumerMessage{Key: []byte("not-ferry"), Value: []byte("x"), Offset: int64(i)})
	}
	if n := strings.Count(logs.String(), "foreign key"); n != 1 {
		t.Fatalf("%d log lines for 100 foreign keys within an interval, want 1:\n%.600s", n, logs.String())
	}
	// An interval later the next one is logged, with the count held back.
	later := time.Now().Add(foreignLogEvery)
	s.foreign.now = func() time.Time { return later }
	s.apply(0, &sarama.ConsumerMessage{Key: []byte("not-ferry"), Value: []byte("x"), Offset: 100})
	if n := strings.Count(logs.String(), "foreign key"); n != 2 || !strings.Contains(logs.String(), "suppressed_before=99") {
		t.Fatalf("after an interval: %d lines, want 2, the last with suppressed_before=99:\n%s", n, logs.String())
	}
}
