package groups

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A group whose offsets cannot be read is named once when that starts and
// once when it ends, and counted while it lasts: it is not synced, and
// nothing said so before (it was logged at debug only).
func TestPollerNamesAGroupItCannotRead(t *testing.T) {
	c := sourceCluster(t, 0)
	var refuse atomic.Bool
	refuse.Store(true)
	c.ControlKey(int16(kmsg.OffsetFetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.OffsetFetchRequest)
		if !refuse.Load() || !fetches(req, "locked") {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Version = req.Version
		const groupAuthorizationFailed = 30
		resp.ErrorCode = groupAuthorizationFailed
		for _, g := range req.Groups {
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: groupAuthorizationFailed})
		}
		return resp, nil, true
	})
	cl := client(t, c.ListenAddrs())
	commit(t, cl, "locked", map[Partition]int64{{"orders", 0}: 0}, "")
	commit(t, cl, "open", map[Partition]int64{{"orders", 0}: 0}, "")
	r, _ := newReader(t, c.ListenAddrs(), Options{Include: []string{".*"}, Max: 100})
	var logs bytes.Buffer
	m := NewMetrics(prometheus.NewRegistry())
	p := NewPoller(r, time.Hour, onlyOrders, slog.New(slog.NewTextHandler(&logs, nil)), m)

	p.poll()
	p.poll()
	if got := testutil.ToFloat64(m.Unread); got != 1 {
		t.Errorf("ferry_fetcher_groups_unread %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Reads.WithLabelValues("ok")); got != 2 {
		t.Errorf("ok reads %v, want 2", got)
	}
	warned := strings.Count(logs.String(), "level=WARN msg=\"offsets of a source group not read")
	if warned != 1 || !strings.Contains(logs.String(), "group=locked") {
		t.Fatalf("want one warning naming the group over two reads, got %d:\n%s", warned, logs.String())
	}
	if snap, ok, _ := p.Latest(); !ok || snap.Offsets["open"] == nil {
		t.Fatalf("the readable group is not in the snapshot: %v", snap.Offsets)
	}

	refuse.Store(false)
	p.poll()
	if got := testutil.ToFloat64(m.Unread); got != 0 {
		t.Errorf("ferry_fetcher_groups_unread %v once readable, want 0", got)
	}
	if !strings.Contains(logs.String(), `msg="offsets of a source group read again, or the group is gone" group=locked`) {
		t.Errorf("the end was not logged:\n%s", logs.String())
	}
}

// fetches reports whether req asks for group's offsets.
func fetches(req *kmsg.OffsetFetchRequest, group string) bool {
	if req.Group == group {
		return true
	}
	for _, g := range req.Groups {
		if g.Group == group {
			return true
		}
	}
	return false
}
