package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/groupsync"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	fetcher "github.com/ferry-replicator/ferry/services/fetcher/inprocess"
)

// sourceConfig writes a fetcher configuration of link naming the source
// at addrs, as the old source's fetchers ran with, and returns its path.
func sourceConfig(t *testing.T, link string, addrs []string) string {
	t.Helper()
	yaml := fmt.Sprintf("id: f1\nlink:\n  name: %s\nsource:\n  bootstrap_servers: [%s]\nwriters:\n  addresses: [127.0.0.1:1]\n"+
		"  tls:\n    cert_file: f.pem\n    key_file: f-key.pem\n    ca_file: ca.pem\n    allowed_ids: [spiffe://ferry.local/ferry/writer]\n",
		link, strings.Join(addrs, ", "))
	path := filepath.Join(t.TempDir(), "fetcher.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// produceTo writes n records to topic's partition p, values prefix-i.
func produceTo(t *testing.T, cl *kgo.Client, topic string, p int32, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// copiedEnd is the target offset after the last record of t's partition p
// whose value starts with prefix (those copied from the source).
func copiedEnd(vals map[int64]string, prefix string) int64 {
	end := int64(-1)
	for off, v := range vals {
		if strings.HasPrefix(v, prefix) && off+1 > end {
			end = off + 1
		}
	}
	return end
}

// Failback after an unplanned failover: the old source A accepted records
// the target B never got (the fetcher stopped first), B's producers then
// wrote on B. failback --dry-run prints each partition's stranded tail
// [committed, A's end) exactly, where writes on B began (the copied end),
// and each group's position on B with its exact position on A when it is
// within what was copied (else the reverse link's); it changes nothing.
// failback then moves the checkpoints to A's end: after resume, a new
// fetcher copies only what A accepted after the failback, never the tail.
// --copy-stranded reports the same and moves nothing.
func TestFailbackReportsTheStrandedTailAndSkipsIt(t *testing.T) {
	r := startReplication(t)
	src := kclient(t, r.source)
	produce(t, src, 0, 40)
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 17, 1: 33})
	r.waitStatus(t, "orders copied and app synced", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 40 && l.Partitions[1].Committed == 40 &&
			len(l.Groups) == 1 && len(l.Groups[0].Partitions) >= 2 &&
			l.Groups[0].Partitions[0].StandsFor == 17 && l.Groups[0].Partitions[1].StandsFor == 33
	})
	r.fetcher.Stop()
	produce(t, src, 1, 25)                  // the stranded tail: [40, 65) of orders/0 and 1
	produceTo(t, src, "orders", 2, "p2", 5) // and [0, 5) of orders/2, of which nothing was copied
	if code, _, errOut := r.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes", "--reason", "region A lost"); code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	// B's producers and consumers carry on: app reads orders/1 past the copy.
	tgt := kclient(t, r.cluster)
	produceTo(t, tgt, "east.orders", 0, "B0", 10)
	produceTo(t, tgt, "east.orders", 1, "B1", 10)
	onB0, onB1 := values(t, r.cluster, "east.orders", 0, 50), values(t, r.cluster, "east.orders", 1, 50)
	end0, end1 := copiedEnd(onB0, "p0-b0-"), copiedEnd(onB1, "p1-b0-")
	commitGroup(t, r.cluster, "app", "east.orders", map[int32]int64{1: end1 + 4})
	cfg := sourceConfig(t, "east", r.source.ListenAddrs())

	code, out, errOut := r.run(t, "ferryctl", "failback", "east", "--source-config", cfg, "--dry-run", "-o", "json")
	if code != exitOK {
		t.Fatalf("failback --dry-run exited %d: %s%s", code, out, errOut)
	}
	var rep FailbackReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []FailbackPartition{
		{Topic: "orders", TargetTopic: "east.orders", Partition: 0, Committed: 40, SourceEnd: 65, StrandedFrom: 40, StrandedTo: 65, StrandedOffsets: 25, TargetStart: end0},
		{Topic: "orders", TargetTopic: "east.orders", Partition: 1, Committed: 40, SourceEnd: 65, StrandedFrom: 40, StrandedTo: 65, StrandedOffsets: 25, TargetStart: end1},
		{Topic: "orders", Partition: 2, Committed: -1, SourceEnd: 5, StrandedFrom: 0, StrandedTo: 5, StrandedOffsets: 5, TargetStart: -1},
	}
	if !rep.DryRun || len(rep.Partitions) != len(want) {
		t.Fatalf("failback --dry-run reported %+v, want a dry run of %d partitions", rep, len(want))
	}
	for i, w := range want {
		got := rep.Partitions[i]
		got.Note, got.TargetTopic = "", w.TargetTopic // the empty partition's target topic is named or not
		if got.StrandedRecords == nil || *got.StrandedRecords != w.StrandedOffsets {
			t.Errorf("orders/%d: %v stranded records counted (%s), want %d", w.Partition, got.StrandedRecords, got.Uncounted, w.StrandedOffsets)
		}
		got.StrandedRecords = nil
		if got != w {
			t.Errorf("orders/%d reported %+v, want %+v", w.Partition, rep.Partitions[i], w)
		}
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Group != "app" || len(rep.Groups[0].Partitions) != 2 {
		t.Fatalf("groups reported %+v, want app on orders/0 and 1", rep.Groups)
	}
	g0, g1 := rep.Groups[0].Partitions[0], rep.Groups[0].Partitions[1]
	if g0.Carry != "exact" || g0.SourceOffset == nil || *g0.SourceOffset != 17 || g0.TargetOffset >= end0 || onB0[g0.TargetOffset] != "p0-b0-17" {
		t.Errorf("app orders/0 reported %+v, want exact at source 17 (target %q)", g0, onB0[g0.TargetOffset])
	}
	if g1.Carry != "reverse_link" || g1.SourceOffset != nil || g1.TargetOffset != end1+4 {
		t.Errorf("app orders/1 reported %+v, want target %d carried by the reverse link", g1, end1+4)
	}
	if l := r.status(t).Links[0]; l.State != linkstate.FailedOver || l.Partitions[0].Committed != 40 || l.Partitions[2].Committed != -1 {
		t.Fatalf("failback --dry-run changed the link: %+v", l)
	}

	// --copy-stranded reports alike and leaves the checkpoints.
	code, out, errOut = r.run(t, "ferryctl", "failback", "east", "--source-config", cfg, "--copy-stranded", "-o", "json")
	var kept FailbackReport
	if err := json.Unmarshal([]byte(out), &kept); code != exitOK || err != nil || !kept.CopyStranded || len(kept.Partitions) != 3 ||
		kept.Partitions[0].StrandedTo != 65 || kept.Partitions[0].Checkpoint != nil {
		t.Fatalf("failback --copy-stranded exited %d (%v): %s%s", code, err, out, errOut)
	}
	if l := r.status(t).Links[0]; l.Partitions[0].Committed != 40 || l.Partitions[2].Committed != -1 {
		t.Fatalf("failback --copy-stranded moved a checkpoint: %+v", l.Partitions)
	}

	// The checkpoints move to A's end; the meter goes on reporting what
	// the copy holds (the writers remember it), so the report says where
	// they moved.
	moved, _ := failbackJSON(t, r, exitOK, "--source-config", cfg)
	for i, next := range []int64{65, 65, 5} {
		if p := moved.Partitions[i]; p.Checkpoint == nil || *p.Checkpoint != next || p.StrandedTo != next {
			t.Errorf("orders/%d after failback: %+v, want its checkpoint at A's end %d", i, p, next)
		}
	}
	if l := r.status(t).Links[0]; l.State != linkstate.FailedOver {
		t.Errorf("failback resumed the link: %s", l.State)
	}

	// A accepts more; the original direction restarts and copies only
	// that. The link is failed_over: resume wants --force; the meter
	// never saw the tail (the fetcher stopped first), so it names none.
	produce(t, src, 2, 7)
	produceTo(t, src, "orders", 2, "p2-after", 3)
	if code, _, errOut := r.run(t, "ferryctl", "resume", "east"); code != exitFailed || !strings.Contains(errOut, "--force") {
		t.Fatalf("resume of the failed_over link exited %d: %s", code, errOut)
	}
	if code, out, errOut := r.run(t, "ferryctl", "resume", "east", "--force"); code != exitOK || !strings.Contains(out, "nothing the meter names") {
		t.Fatalf("resume --force exited %d: %s%s", code, out, errOut)
	}
	r.fetcher = fetcher.Start(t, r.fetcherOpts)
	r.waitStatus(t, "the records after the failback copied", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 72 && l.Partitions[1].Committed == 72 && l.Partitions[2].Committed == 8
	})
	for p, n := range map[int32]int{0: 57, 1: 57, 2: 3} {
		seen := map[string]int{}
		for _, v := range values(t, r.cluster, "east.orders", p, n) {
			seen[v]++
			if strings.Contains(v, "-b1-") || (p == 2 && !strings.HasPrefix(v, "p2-after")) {
				t.Errorf("east.orders/%d holds %q of the stranded tail", p, v)
			}
		}
		if want := fmt.Sprintf("p%d-b2-6", p); p < 2 && seen[want] != 1 {
			t.Errorf("east.orders/%d holds %q %d times, want once", p, want, seen[want])
		}
		if len(seen) != n {
			t.Errorf("east.orders/%d holds %d distinct records, want %d", p, len(seen), n)
		}
	}
}

// failback refuses, changing nothing: a link that is not failed_over (exit
// 1, and the writers refuse SetCheckpoints for it too), a caller outside
// control.allowed_ids (1), a missing, unreadable or other link's
// --source-config (2); --help answers.
func TestFailbackRefusals(t *testing.T) {
	r := startReplication(t)
	produce(t, kclient(t, r.source), 0, 5)
	r.waitStatus(t, "orders copied", func(l LinkReport) bool {
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 5
	})
	cfg := sourceConfig(t, "east", r.source.ListenAddrs())

	code, out, errOut := r.run(t, "ferryctl", "failback", "east", "--source-config", cfg)
	if code != exitFailed || !strings.Contains(errOut, "not failed_over") {
		t.Fatalf("failback of a running link exited %d: %s%s", code, out, errOut)
	}
	var c conn
	c.writers, c.ids = multi{r.writers[0].Addr}, multi{"spiffe://ferry.local/ferry/writer"}
	c.cert, c.key, c.ca = filepath.Join(r.dir, "ferryctl.pem"), filepath.Join(r.dir, "ferryctl-key.pem"), filepath.Join(r.dir, "ca.pem")
	c.output = "text"
	cl, err := c.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	_, err = cl.writers[0].ctl.SetCheckpoints(context.Background(), &ferryv1.SetCheckpointsRequest{Link: "east",
		Checkpoints: []*ferryv1.CheckpointPosition{{Topic: "orders", Partition: 0, NextSourceOffset: 5}}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("SetCheckpoints of a running link answered %v, want FailedPrecondition", err)
	}
	// orders/2 has no checkpoint (nothing copied), but a writer serving a
	// stream of the link refuses it too: the link has started.
	l := r.waitStatus(t, "a shard served", func(l LinkReport) bool {
		return slices.ContainsFunc(l.Shards, func(s ShardReport) bool { return s.Active })
	})
	serving := l.Shards[slices.IndexFunc(l.Shards, func(s ShardReport) bool { return s.Active })].Writer
	c.writers = multi{serving}
	sc, err := c.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.close()
	_, err = sc.writers[0].ctl.SetCheckpoints(context.Background(), &ferryv1.SetCheckpointsRequest{Link: "east",
		Checkpoints: []*ferryv1.CheckpointPosition{{Topic: "orders", Partition: 2, NextSourceOffset: 3}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "opened on this writer") {
		t.Fatalf("SetCheckpoints of orders/2 (no checkpoint) on writer %s serving the link answered %v, want FailedPrecondition", serving, err)
	}

	r.fetcher.Stop()
	if code, _, errOut := r.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes"); code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	// The writers refuse, writing nothing, a checkpoint moving back and
	// requests that name no partition or one twice.
	for _, bad := range []struct {
		ps   []*ferryv1.CheckpointPosition
		code codes.Code
	}{
		{[]*ferryv1.CheckpointPosition{{Topic: "orders", Partition: 1, NextSourceOffset: 9}, {Topic: "orders", Partition: 0, NextSourceOffset: 3}}, codes.FailedPrecondition},
		{nil, codes.InvalidArgument},
		{[]*ferryv1.CheckpointPosition{{Topic: "orders", NextSourceOffset: 9}, {Topic: "orders", NextSourceOffset: 9}}, codes.InvalidArgument},
	} {
		_, err := cl.writers[0].ctl.SetCheckpoints(context.Background(), &ferryv1.SetCheckpointsRequest{Link: "east", Checkpoints: bad.ps})
		if status.Code(err) != bad.code {
			t.Errorf("SetCheckpoints of %v answered %v, want %v", bad.ps, err, bad.code)
		}
	}
	if code, _, errOut = r.run(t, "fetcher", "failback", "east", "--source-config", cfg); code != exitFailed || !strings.Contains(errOut, "PermissionDenied") {
		t.Fatalf("failback as the fetcher exited %d: %s", code, errOut)
	}
	for _, bad := range []struct{ name, path, says string }{
		{"missing", "", "--source-config"},
		{"unreadable", filepath.Join(t.TempDir(), "none.yaml"), "none.yaml"},
		{"another link's", sourceConfig(t, "west", r.source.ListenAddrs()), `"west"`},
	} {
		args := []string{"failback", "east"}
		if bad.path != "" {
			args = append(args, "--source-config", bad.path)
		}
		if code, _, errOut = r.run(t, "ferryctl", args...); code != exitUsage || !strings.Contains(errOut, bad.says) {
			t.Errorf("failback with a %s --source-config exited %d: %s", bad.name, code, errOut)
		}
	}
	if l := r.status(t).Links[0]; l.Partitions[0].Committed != 5 || l.Partitions[1].Committed != 5 {
		t.Fatalf("a refused failback moved a checkpoint: %+v", l.Partitions)
	}
	if code, _, errOut = r.run(t, "ferryctl", "failback", "--help"); code != exitOK || !strings.Contains(errOut, "Usage: ferryctl failback") {
		t.Errorf("failback --help exited %d: %s", code, errOut)
	}
}

// joinGroup keeps a consumer of group on c's topic as a live member until
// the test ends.
func joinGroup(t *testing.T, c *kfake.Cluster, group, topic string) {
	t.Helper()
	assigned := make(chan struct{}, 1)
	cons := kclient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // polling keeps the member in the group
		defer close(done)
		for ctx.Err() == nil {
			cons.PollFetches(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-assigned:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer of %s never joined", group)
	}
}

// sourceGroup is group's committed offset and metadata on partition p of
// orders on the old source.
func sourceGroup(t *testing.T, c *kfake.Cluster, group string, p int32) (int64, string) {
	t.Helper()
	os, err := kadm.NewClient(kclient(t, c)).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := os.Lookup("orders", p)
	if !ok {
		return -1, ""
	}
	return o.At, o.Metadata
}

// offsetOf is the offset of value v in vals (-1: none).
func offsetOf(vals map[int64]string, v string) int64 {
	for off, got := range vals {
		if got == v {
			return off
		}
	}
	return -1
}

// failbackJSON runs failback with args, wants exit code want, and
// decodes its report; stderr is returned too.
func failbackJSON(t *testing.T, r replication, want int, args ...string) (FailbackReport, string) {
	t.Helper()
	code, out, errOut := r.run(t, "ferryctl", append([]string{"failback", "east", "-o", "json"}, args...)...)
	var rep FailbackReport
	if err := json.Unmarshal([]byte(out), &rep); code != want || err != nil {
		t.Fatalf("failback %v exited %d, want %d (%v): %s%s", args, code, want, err, out, errOut)
	}
	return rep, errOut
}

// groupPart is group's report of orders/p.
func groupPart(t *testing.T, rep FailbackReport, group string, p int32) FailbackGroupPartition {
	t.Helper()
	for _, g := range rep.Groups {
		for _, gp := range g.Partitions {
			if g.Group == group && gp.Partition == p {
				return gp
			}
		}
	}
	t.Fatalf("no %s orders/%d in %+v", group, p, rep.Groups)
	return FailbackGroupPartition{}
}

// failback --move-groups commits, on the old source A, each selected
// group's partitions carried "exact" at the printed source offset, with
// Ferry's marker, and moves no checkpoint: app's orders/0 moves forward
// to where app read on B; its orders/1, past the copied end, is left to
// the reverse link, and marked as Ferry's where it stands on A (else
// that link's group sync would leave the consumers' old commit there
// alone); live, with a member on A, is refused whole; ahead's orders/0,
// already further on A, is not moved back unless --allow-backwards, its
// orders/1, already there, is marked; --dry-run reports the same and
// changes nothing. A group refused while others moved makes the command
// exit 4 (partial), as does one that selects no group.
func TestFailbackMovesGroupsBack(t *testing.T) {
	r := startReplication(t)
	src := kclient(t, r.source)
	produce(t, src, 0, 40)
	commitGroup(t, r.source, "app", "orders", map[int32]int64{0: 17, 1: 33})
	commitGroup(t, r.source, "live", "orders", map[int32]int64{0: 10, 1: 12})
	commitGroup(t, r.source, "ahead", "orders", map[int32]int64{0: 5, 1: 6})
	r.waitStatus(t, "orders copied and the groups synced", func(l LinkReport) bool {
		synced := 0
		for _, g := range l.Groups {
			if len(g.Partitions) >= 2 && g.Partitions[0].StandsFor == g.Partitions[0].SourceOffset && g.Partitions[1].StandsFor == g.Partitions[1].SourceOffset {
				synced++
			}
		}
		return len(l.Partitions) == 3 && l.Partitions[0].Committed == 40 && l.Partitions[1].Committed == 40 && synced == 3
	})
	r.fetcher.Stop()
	produce(t, src, 1, 25) // the stranded tail
	if code, _, errOut := r.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes"); code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	// app reads on B: orders/0 up to source record 25, orders/1 past the copy.
	onB0, onB1 := values(t, r.cluster, "east.orders", 0, 40), values(t, r.cluster, "east.orders", 1, 40)
	commitGroup(t, r.cluster, "app", "east.orders", map[int32]int64{0: offsetOf(onB0, "p0-b0-25"), 1: copiedEnd(onB1, "p1-b0-") + 4})
	// live read on B too, and then runs on A; ahead read further on A
	// after its last sync.
	commitGroup(t, r.cluster, "live", "east.orders", map[int32]int64{0: offsetOf(onB0, "p0-b0-20"), 1: offsetOf(onB1, "p1-b0-22")})
	commitGroup(t, r.source, "ahead", "orders", map[int32]int64{0: 30, 1: 6})
	joinGroup(t, r.source, "live", "orders")
	cfg := sourceConfig(t, "east", r.source.ListenAddrs())

	dry, _ := failbackJSON(t, r, exitOK, "--source-config", cfg, "--move-groups", "--dry-run")
	if gp := groupPart(t, dry, "app", 0); !dry.DryRun || !dry.MoveGroups || gp.Action != "moved" || *gp.SourceOffset != 25 {
		t.Errorf("dry run reported app orders/0 %+v (dry run %v, move groups %v), want moved to 25", gp, dry.DryRun, dry.MoveGroups)
	}
	if o, _ := sourceGroup(t, r.source, "app", 0); o != 17 {
		t.Fatalf("failback --move-groups --dry-run moved app on A to %d", o)
	}

	if _, errOut := failbackJSON(t, r, exitPartial, "--source-config", cfg, "--move-groups", "--groups", "none"); !strings.Contains(errOut, "moved no group") {
		t.Errorf("failback --move-groups selecting no group said %q", errOut)
	}

	// live's refusal makes the command partial (exit 4), naming it, after
	// the whole report.
	rep, errOut := failbackJSON(t, r, exitPartial, "--source-config", cfg, "--move-groups")
	if !strings.Contains(errOut, "live") || strings.Contains(errOut, "app") {
		t.Errorf("failback --move-groups said %q, want live named as refused, and app not", errOut)
	}
	for _, c := range []struct {
		group  string
		p      int32
		action string
		onA    int64
	}{
		{"app", 0, "moved", 25},
		{"app", 1, "reverse_link", 33}, // marked: see below
		{"live", 0, "refused", 10},
		{"live", 1, "refused", 12},
		{"ahead", 0, "backwards", 30},
		{"ahead", 1, "marked", 6},
	} {
		gp := groupPart(t, rep, c.group, c.p)
		o, meta := sourceGroup(t, r.source, c.group, c.p)
		if gp.Action != c.action || o != c.onA {
			t.Errorf("%s orders/%d: reported %+v, at %d on A; want %s, at %d", c.group, c.p, gp, o, c.action, c.onA)
		}
		if c.action == "moved" && meta != groupsync.Marker(gp.TargetOffset) {
			t.Errorf("%s orders/%d moved with metadata %q, want Ferry's marker of its target offset %d", c.group, c.p, meta, gp.TargetOffset)
		}
	}
	// app's orders/1 stays where its consumers left it on A, now with
	// Ferry's marker of the target offset it stands for, so that the
	// reverse link's group sync, which leaves offsets committed by
	// others alone, may move it.
	if _, meta := sourceGroup(t, r.source, "app", 1); meta != groupsync.Marker(offsetOf(onB1, "p1-b0-33")) {
		t.Errorf("app orders/1 on A has metadata %q, want Ferry's marker of %d", meta, offsetOf(onB1, "p1-b0-33"))
	}
	if l := r.status(t).Links[0]; l.State != linkstate.FailedOver || l.Partitions[0].Committed != 40 || l.Partitions[1].Committed != 40 {
		t.Errorf("failback --move-groups moved a checkpoint or the link: %+v", l)
	}
	// The groups moved whole are handed back to the link's group sync on
	// B (their consumers committed there during the failover, so the sync
	// would leave them alone for good); live, refused, is not.
	handed := map[string]bool{}
	for _, g := range r.status(t).Links[0].Groups {
		handed[g.Group] = g.HandedBack
	}
	for _, g := range rep.Groups {
		if want := g.Group != "live"; g.HandedBack != want || handed[g.Group] != want || g.HandBackError != "" {
			t.Errorf("group %s: reported handed back %v (%q), the writer says %v; want %v", g.Group, g.HandedBack, g.HandBackError, handed[g.Group], want)
		}
	}
	if dry.Groups[0].HandedBack || dry.Groups[1].HandedBack || dry.Groups[2].HandedBack {
		t.Errorf("the dry run handed groups back: %+v", dry.Groups)
	}

	back, _ := failbackJSON(t, r, exitOK, "--source-config", cfg, "--move-groups", "--groups", "ahead", "--allow-backwards")
	if gp := groupPart(t, back, "ahead", 0); gp.Action != "moved" {
		t.Errorf("--allow-backwards reported ahead orders/0 %+v, want moved", gp)
	}
	if o, _ := sourceGroup(t, r.source, "ahead", 0); o != 5 {
		t.Errorf("--allow-backwards left ahead orders/0 on A at %d, want 5", o)
	}
}
