package server

import (
	"strings"
	"testing"
	"time"
)

// A source topic that keeps its records longer than the offset index
// keeps their runs is named, with why: compacted, retention.ms -1 or
// above the index's, or no retention.ms where the index keeps less than
// Kafka's default.
func TestIndexGap(t *testing.T) {
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name    string
		configs map[string]string
		index   time.Duration
		says    string // "" when covered
	}{
		{"compacted", map[string]string{"cleanup.policy": "compact"}, week, "compacted"},
		{"compacted and deleted", map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "3600000"}, week, ""},
		{"infinite", map[string]string{"retention.ms": "-1"}, week, "no time limit"},
		{"longer", map[string]string{"retention.ms": "1209600000"}, week, "retention.ms 1209600000 keeps records 336h0m0s"},
		{"shorter", map[string]string{"retention.ms": "86400000"}, week, ""},
		{"equal", map[string]string{"retention.ms": "604800000"}, week, ""},
		{"broker default under a shorter index", nil, 24 * time.Hour, "brokers' default retention"},
		{"broker default", nil, week, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := indexGap(tc.configs, tc.index)
			if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
				t.Errorf("indexGap(%v, %v) = %q, want %q", tc.configs, tc.index, got, tc.says)
			}
		})
	}
}
