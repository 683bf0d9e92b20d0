package cli

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
)

// running is link east running at generation 2, orders/0 12 records
// behind its last heartbeat and orders/1 caught up.
func running() *linkState {
	return &linkState{control: control(ferryv1.LinkState_LINK_STATE_RUNNING, 2),
		partitions: []*ferryv1.LinkPartition{meter(0, 88, 100), meter(1, 50, 50)}}
}

// failover without its form is a usage error naming both forms and what
// each does, and changes nothing, a dry run included; with either form
// --dry-run prints the report and changes nothing.
func TestFailoverNeedsItsForm(t *testing.T) {
	ft := startFakes(t, running(), &fakeWriter{}, &fakeWriter{})
	for _, args := range [][]string{
		{"failover", "east"},
		{"failover", "east", "--dry-run"},
		{"failover", "east", "--planned", "--unplanned"},
		{"failover", "east", "--yes"},
	} {
		code, out, errOut := ft.run(t, nil, args...)
		if code != exitUsage || !strings.Contains(errOut, "--planned (the source reachable") ||
			!strings.Contains(errOut, "--unplanned (the source region lost") || !strings.Contains(errOut, "Usage: ferryctl failover") {
			t.Errorf("%v exited %d, want %d naming both forms: %s%s", args, code, exitUsage, out, errOut)
		}
	}
	for _, form := range []string{"--planned", "--unplanned"} {
		code, out, errOut := ft.run(t, nil, "failover", "east", form, "--dry-run")
		if code != exitOK || !strings.Contains(out, "DRY RUN") || !strings.Contains(out, "orders/0") {
			t.Errorf("failover %s --dry-run exited %d: %s%s", form, code, out, errOut)
		}
	}
	if sets := ft.link.taken(); len(sets) != 0 {
		t.Fatalf("the link was changed: %v", sets)
	}
}

// An unplanned failover without --yes shows what it loses and asks: only
// "yes" fails the link over, conditional on the generation shown; any
// other answer cancels (exit 1); stdin that is no terminal (no stdin, a
// pipe), that ends without an answer, or -o json is refused (exit 2)
// saying to pass --yes. Nothing changes but on "yes" and --yes.
func TestUnplannedFailoverConfirms(t *testing.T) {
	pipe, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	w.Close()
	for _, c := range []struct {
		name  string
		stdin io.Reader
		args  []string
		code  int
		says  []string
		// asked: the report and the question were shown; expected: the
		// generation the change was conditional on (-1: no change).
		asked    bool
		expected int64
	}{
		{name: "no stdin", code: exitUsage, says: []string{"not a terminal", "--yes"}, expected: -1},
		{name: "a pipe", stdin: pipe, code: exitUsage, says: []string{"not a terminal", "--yes"}, expected: -1},
		{name: "no answer", stdin: strings.NewReader(""), code: exitUsage, says: []string{"ended without an answer", "--yes"}, asked: true, expected: -1},
		{name: "no", stdin: strings.NewReader("no\n"), code: exitFailed, says: []string{"not failed over", "cancelled", `"no"`}, asked: true, expected: -1},
		{name: "y", stdin: strings.NewReader("y\n"), code: exitFailed, says: []string{"cancelled"}, asked: true, expected: -1},
		{name: "-o json", stdin: strings.NewReader("yes\n"), args: []string{"-o", "json"}, code: exitUsage, says: []string{"-o json does not ask", "--yes"}, expected: -1},
		{name: "yes", stdin: strings.NewReader("yes\n"), code: exitOK, asked: true, expected: 2},
		{name: "--yes", args: []string{"--yes"}, code: exitOK, expected: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ft := startFakes(t, running(), &fakeWriter{}, &fakeWriter{})
			code, out, errOut := ft.run(t, c.stdin, append([]string{"failover", "east", "--unplanned"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exited %d, want %d: %s%s", code, c.code, out, errOut)
			}
			for _, s := range c.says {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q lacks %q", errOut, s)
				}
			}
			asked := strings.Contains(errOut, "an unplanned failover now loses") && strings.Contains(errOut, "orders/0") &&
				strings.Contains(errOut, "Only 'yes' will be accepted")
			if asked != c.asked {
				t.Errorf("report and question shown: %v, want %v:\n%s", asked, c.asked, errOut)
			}
			sets := ft.link.taken()
			switch {
			case c.expected < 0 && len(sets) != 0:
				t.Errorf("the link was changed: %v", sets)
			case c.expected >= 0 && (len(sets) != 1 || sets[0].GetState() != ferryv1.LinkState_LINK_STATE_FAILED_OVER ||
				sets[0].GetExpectedGeneration() != uint64(c.expected)):
				t.Errorf("changes %v, want one to failed_over conditional on generation %d", sets, c.expected)
			case c.expected >= 0 && !strings.Contains(out, "failed_over (generation 3)"):
				t.Errorf("stdout %q, want the link failed_over at generation 3", out)
			}
		})
	}
}

// resume refuses a failed_over link (exit 1), naming the partitions the
// target lacks records of at the failover and failback as the safe path;
// --force resumes it, conditional on the generation read, and prints the
// same warning. A paused link resumes without --force.
func TestResumeRefusesFailedOver(t *testing.T) {
	l := running()
	l.control = control(ferryv1.LinkState_LINK_STATE_FAILED_OVER, 3)
	ft := startFakes(t, l, &fakeWriter{}, &fakeWriter{})
	const tail = "orders/0 (12 offsets, source offsets [88, 100))"

	code, out, errOut := ft.run(t, nil, "resume", "east")
	if code != exitFailed || !strings.Contains(errOut, tail) || strings.Contains(errOut, "orders/1") ||
		!strings.Contains(errOut, "ferryctl failback east") || !strings.Contains(errOut, "--force") {
		t.Fatalf("resume of a failed_over link exited %d: %s%s", code, out, errOut)
	}
	if sets := ft.link.taken(); len(sets) != 0 {
		t.Fatalf("a refused resume changed the link: %v", sets)
	}

	code, out, errOut = ft.run(t, nil, "resume", "east", "--force", "-o", "json")
	var ch Change
	if err := json.Unmarshal([]byte(out), &ch); code != exitOK || err != nil {
		t.Fatalf("resume --force exited %d (%v): %s%s", code, err, out, errOut)
	}
	if ch.State != linkstate.Running || !strings.Contains(ch.Warning, tail) || !strings.Contains(ch.Warning, "ferryctl failback east") {
		t.Errorf("resume --force answered %+v, want running with the warning", ch)
	}
	if sets := ft.link.taken(); len(sets) != 1 || sets[0].GetExpectedGeneration() != 3 {
		t.Errorf("resume --force changes %v, want one conditional on generation 3", sets)
	}
	if code, out, errOut = ft.run(t, nil, "resume", "east"); code != exitOK || strings.Contains(out, "WARNING") {
		t.Errorf("resume of a running link exited %d: %s%s", code, out, errOut)
	}

	paused := startFakes(t, &linkState{control: control(ferryv1.LinkState_LINK_STATE_PAUSED, 1)}, &fakeWriter{})
	if code, out, errOut := paused.run(t, nil, "resume", "east"); code != exitOK || strings.Contains(out, "WARNING") {
		t.Errorf("resume of a paused link exited %d: %s%s", code, out, errOut)
	}
}

// Once failback moved every partition's checkpoint past the copy, resume
// of the failed_over link needs no --force and warns of nothing: it copies
// only what the old source takes from now on. One partition not moved (a
// failback that did not finish) and it is refused again.
func TestResumeAfterFailbackNeedsNoForce(t *testing.T) {
	moved := func(p int32, committed, hw, resume int64) *ferryv1.LinkPartition {
		m := meter(p, committed, hw)
		m.CheckpointMoved, m.ResumeNextOffset = true, resume
		return m
	}
	l := &linkState{control: control(ferryv1.LinkState_LINK_STATE_FAILED_OVER, 3),
		partitions: []*ferryv1.LinkPartition{moved(0, 88, 100, 104), moved(1, 50, 50, 50)}}
	ft := startFakes(t, l, &fakeWriter{})
	code, out, errOut := ft.run(t, nil, "resume", "east", "-o", "json")
	var ch Change
	if err := json.Unmarshal([]byte(out), &ch); code != exitOK || err != nil || ch.Warning != "" || ch.State != linkstate.Running {
		t.Fatalf("resume after failback exited %d (%v): %+v %s", code, err, ch, errOut)
	}

	half := &linkState{control: control(ferryv1.LinkState_LINK_STATE_FAILED_OVER, 3),
		partitions: []*ferryv1.LinkPartition{moved(0, 88, 100, 104), meter(1, 50, 50)}}
	ft = startFakes(t, half, &fakeWriter{})
	if code, out, errOut := ft.run(t, nil, "resume", "east"); code != exitFailed || !strings.Contains(errOut, "--force") {
		t.Fatalf("resume with a partition failback did not move exited %d: %s%s", code, out, errOut)
	}
	if sets := half.taken(); len(sets) != 0 {
		t.Fatalf("a refused resume changed the link: %v", sets)
	}
}

// Partial outcomes exit 4, after the whole report, naming what is
// missing: a writer that never reads a change back (pending), a meter
// unread after a failover, a group left without a target position
// (reread_uncounted, as structured fields) or owned on the target, a dry
// run a writer did not answer. The whole outcome exits 0.
func TestPartialOutcomesExit4(t *testing.T) {
	uncounted := &ferryv1.LinkGroup{Group: "app", Outcome: "moved", Partitions: []*ferryv1.LinkGroupPartition{
		{Topic: "orders", Partition: 0, SourceOffset: 80, TargetOffset: 81, StandsForSourceOffset: 80},
		{Topic: "orders", Partition: 1, SourceOffset: 40, TargetOffset: -1, StandsForSourceOffset: -1, Note: "index_loading"},
	}}
	owned := &ferryv1.LinkGroup{Group: "theirs", Outcome: "owned", Detail: "orders/0 at 3 committed by another client",
		Partitions: []*ferryv1.LinkGroupPartition{{Topic: "orders", Partition: 0, SourceOffset: 10, TargetOffset: -1, StandsForSourceOffset: -1}}}
	for _, c := range []struct {
		name    string
		groups  []*ferryv1.LinkGroup
		writers []*fakeWriter
		args    []string
		code    int
		says    string
	}{
		{name: "whole", writers: []*fakeWriter{{}, {}}, args: []string{"failover", "east", "--unplanned", "--yes"}, code: exitOK},
		{name: "pending", writers: []*fakeWriter{{}, {stale: true}}, args: []string{"pause", "east"}, code: exitPartial,
			says: "writer(s) w2 have not read the change back"},
		// Status answers the reads awaiting the change, then fails.
		{name: "meter unread", writers: []*fakeWriter{{failStatusFrom: 2}, {failStatusFrom: 2}}, args: []string{"failover", "east", "--unplanned", "--yes"},
			code: exitPartial, says: "the failover meter could not be read after the change"},
		{name: "uncounted", groups: []*ferryv1.LinkGroup{uncounted}, writers: []*fakeWriter{{}, {}}, args: []string{"failover", "east", "--unplanned", "--yes"},
			code: exitPartial, says: "group app has no target position from Ferry on orders/1 (index_loading)"},
		{name: "owned", groups: []*ferryv1.LinkGroup{owned}, writers: []*fakeWriter{{}, {}}, args: []string{"failover", "east", "--unplanned", "--yes"},
			code: exitPartial, says: "group theirs is owned on the target"},
		{name: "dry run unanswered", writers: []*fakeWriter{{}, {failStatusFrom: 1}}, args: []string{"failover", "east", "--unplanned", "--dry-run"},
			code: exitPartial, says: "writer w2 did not answer"},
		{name: "dry run uncounted", groups: []*ferryv1.LinkGroup{uncounted}, writers: []*fakeWriter{{}, {}}, args: []string{"failover", "east", "--unplanned", "--dry-run"},
			code: exitOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := running()
			l.groups = c.groups
			ft := startFakes(t, l, c.writers...)
			code, out, errOut := ft.run(t, nil, append(c.args, "-o", "json")...)
			var ch Change
			if err := json.Unmarshal([]byte(out), &ch); code != c.code || err != nil {
				t.Fatalf("exited %d, want %d (%v): %s%s", code, c.code, err, out, errOut)
			}
			var f Failure
			if c.code == exitOK {
				if errOut != "" {
					t.Errorf("a whole outcome said %q", errOut)
				}
				return
			}
			if err := json.Unmarshal([]byte(errOut), &f); err != nil || f.ExitCode != exitPartial || !strings.Contains(f.Error, c.says) {
				t.Errorf("stderr %q (%v), want a partial error saying %q", errOut, err, c.says)
			}
			if c.name == "uncounted" {
				want := UncountedPartition{Topic: "orders", Partition: 1, Reason: "index_loading"}
				if len(ch.Groups) != 1 || len(ch.Groups[0].Uncounted) != 1 || ch.Groups[0].Uncounted[0] != want {
					t.Errorf("groups %+v, want app's reread_uncounted %+v", ch.Groups, want)
				}
			}
		})
	}
	// The text says it too, the report first.
	l := running()
	l.groups = []*ferryv1.LinkGroup{uncounted}
	ft := startFakes(t, l, &fakeWriter{})
	code, out, errOut := ft.run(t, nil, "failover", "east", "--unplanned", "--yes")
	if code != exitPartial || !strings.Contains(out, "REREAD cannot count orders/1 (index_loading)") ||
		!strings.Contains(errOut, "ferryctl failover: partial: group app has no target position") {
		t.Errorf("failover exited %d: %s%s", code, out, errOut)
	}
}

// Under -o json every error is one JSON line on stderr, its last, with
// the verb and the exit code, whatever the kind (usage, a flag that does
// not parse, an unknown verb, configuration, a refusal, partial);
// progress is JSON lines too; stdout holds the result alone, if any.
func TestErrorsAreJSON(t *testing.T) {
	l := running()
	l.control = control(ferryv1.LinkState_LINK_STATE_FAILED_OVER, 3)
	failedOver := startFakes(t, l, &fakeWriter{})
	live := startFakes(t, running(), &fakeWriter{})
	pending := startFakes(t, running(), &fakeWriter{}, &fakeWriter{stale: true})
	for _, c := range []struct {
		name string
		ft   fakeTarget
		args []string
		verb string
		code int
		says string
	}{
		{"no form", live, []string{"failover", "east"}, "failover", exitUsage, "say which failover"},
		{"bad flag", live, []string{"failover", "east", "--bogus"}, "failover", exitUsage, "-bogus"},
		{"unknown verb", live, []string{"explode"}, "explode", exitUsage, "unknown verb"},
		{"offsets", live, []string{"offsets"}, "offsets", exitUsage, "offsets translate"},
		{"refused", failedOver, []string{"resume", "east"}, "resume", exitFailed, "is failed_over"},
		{"partial", pending, []string{"pause", "east"}, "pause", exitPartial, "have not read the change back"},
		{"done", live, []string{"failover", "east", "--unplanned", "--dry-run"}, "failover", exitOK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := c.ft.run(t, nil, append(c.args, "-o", "json")...)
			checkJSONError(t, code, errOut, c.verb, c.code, c.says)
			if out != "" && !json.Valid([]byte(out)) {
				t.Errorf("stdout is not JSON: %q", out)
			}
		})
	}
	// A configuration ferryctl cannot use (no certificate): the real dial.
	var out, errOut strings.Builder
	code := RunContext(t.Context(), []string{"status", "--writer", "w:1", "-o", "json"}, nil, nil, &out, &errOut)
	checkJSONError(t, code, errOut.String(), "status", exitUsage, "--cert")

	// A planned failover's progress, then its result.
	drained := startFakes(t, &linkState{control: control(ferryv1.LinkState_LINK_STATE_RUNNING, 2),
		partitions: []*ferryv1.LinkPartition{meter(0, 100, 100), meter(1, 50, 50)}}, &fakeWriter{})
	code, stdout, stderr := drained.run(t, nil, "failover", "east", "--planned", "-o", "json")
	checkJSONError(t, code, stderr, "failover", exitOK, "")
	if !strings.Contains(stderr, `{"verb":"failover","progress":"planned failover of east: drain done"}`) || !json.Valid([]byte(stdout)) {
		t.Errorf("planned failover -o json wrote %q to stderr, %q to stdout", stderr, stdout)
	}
}

// checkJSONError checks that stderr holds only JSON lines, the last the
// error of verb with exit code code saying says (none when code is 0).
func checkJSONError(t *testing.T, code int, stderr, verb string, want int, says string) {
	t.Helper()
	if code != want {
		t.Fatalf("exited %d, want %d: %s", code, want, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, line := range lines {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("stderr holds plain text %q", line)
		}
	}
	if want == exitOK {
		if strings.Contains(stderr, `"error"`) {
			t.Errorf("a success said %q", stderr)
		}
		return
	}
	var f Failure
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &f); err != nil || f.Verb != verb || f.ExitCode != want || !strings.Contains(f.Error, says) {
		t.Errorf("last stderr line %q (%v), want %s's error, exit %d, saying %q", lines[len(lines)-1], err, verb, want, says)
	}
}

// failback --move-groups and offsets translate --group: some done, some
// not is partial (4); none done is a failure (1); none selected is
// partial too (the step moved nothing).
func TestPartialGroupOutcomes(t *testing.T) {
	moved := FailbackGroup{Group: "app", Partitions: []FailbackGroupPartition{{Partition: 0, Action: "moved"}}}
	refused := FailbackGroup{Group: "live", Partitions: []FailbackGroupPartition{{Partition: 0, Action: actionRefused, Why: "members"}}}
	unread := FailbackGroup{Group: "gone", Error: "Unavailable"}
	one := int64(1)
	exact := GroupPartitionTranslation{TargetTopic: "east.orders", Partition: 0, SourceOffset: &one, Outcome: outcomeExact}
	before := GroupPartitionTranslation{TargetTopic: "east.orders", Partition: 1, Outcome: outcomeBeforeIndex}
	for _, c := range []struct {
		name string
		err  error
		code int
		says string
	}{
		{"all moved", movedGroups([]FailbackGroup{moved}), exitOK, ""},
		{"some refused", movedGroups([]FailbackGroup{moved, refused}), exitPartial, "live (members)"},
		{"some unread", movedGroups([]FailbackGroup{moved, unread}), exitPartial, "gone (positions unread"},
		{"none moved", movedGroups([]FailbackGroup{refused, unread}), exitFailed, "live (members)"},
		{"none selected", movedGroups(nil), exitPartial, "moved no group"},
		{"report unread", incompleteReport(FailbackReport{Groups: []FailbackGroup{moved, unread}}), exitPartial, "gone (Unavailable)"},
		{"report whole", incompleteReport(FailbackReport{Groups: []FailbackGroup{moved}, Partitions: []FailbackPartition{{Topic: "orders"}}}), exitOK, ""},
		{"tail uncounted", incompleteReport(FailbackReport{Groups: []FailbackGroup{moved}, Partitions: []FailbackPartition{{Topic: "orders", Partition: 2, Uncounted: "above --count-limit"}}}),
			exitPartial, "stranded tails not counted in records: orders/2 (above --count-limit)"},
		{"moved, not handed back", movedGroups([]FailbackGroup{{Group: "app", Partitions: moved.Partitions, HandBackError: "writer w: Unavailable"}}), exitPartial, "not handed back"},
		{"all translated", GroupTranslationReport{Group: "app", Partitions: []GroupPartitionTranslation{exact}}.failure(), exitOK, ""},
		{"some translated", GroupTranslationReport{Group: "app", Partitions: []GroupPartitionTranslation{exact, before}}.failure(), exitPartial, "east.orders/1 (before_index)"},
		{"none translated", GroupTranslationReport{Group: "app", Partitions: []GroupPartitionTranslation{before}}.failure(), exitFailed, "east.orders/1"},
	} {
		if code := exitCode(c.err); code != c.code || c.err != nil && !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: %v, exit %d; want exit %d saying %q", c.name, c.err, code, c.code, c.says)
		}
	}
}

// An unplanned failover reads the meter once the link's streams have
// ended on every writer: a round in flight when the writers refused the
// link commits first, and what it landed is not counted at risk (the
// partition's lag is the 5 records the round did not copy, not 10). A
// stream still open when the call's timeout passes is named, and the
// outcome is partial.
func TestUnplannedFailoverReadsTheMeterOnceStreamsEnd(t *testing.T) {
	for _, c := range []struct {
		name      string
		streaming int
		code      int
		committed int64
	}{
		{"streams end", 3, exitOK, 15},
		{"a stream outlives the wait", 1 << 20, exitPartial, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := running()
			l.partitions = []*ferryv1.LinkPartition{meter(0, 10, 20)}
			l.streaming, l.landed = c.streaming, []*ferryv1.LinkPartition{meter(0, 15, 20)}
			ft := startFakes(t, l, &fakeWriter{})
			code, out, errOut := ft.run(t, nil, "failover", "east", "--unplanned", "--yes", "-o", "json")
			var ch Change
			if err := json.Unmarshal([]byte(out), &ch); code != c.code || err != nil {
				t.Fatalf("exited %d, want %d (%v): %s%s", code, c.code, err, out, errOut)
			}
			if len(ch.AtRisk) != 1 || ch.AtRisk[0].Committed != c.committed || ch.AtRisk[0].LagRecords != 20-c.committed {
				t.Errorf("at risk %+v, want committed %d", ch.AtRisk, c.committed)
			}
			if open := len(ch.Streaming) > 0; open != (c.code == exitPartial) || (open && !strings.Contains(errOut, "had not ended when the meter was read")) {
				t.Errorf("streaming %v, stderr %s", ch.Streaming, errOut)
			}
		})
	}
}

// status exits unhealthy (3) for a running link's groups a failover now
// would not move where their consumers expect, naming each: owned (as
// consumers that moved to the target and back leave it), active, without
// a position from Ferry on a partition it reads, or following a stale
// source read; a group synced and fresh is healthy.
func TestStatusNamesGroupsAFailoverWouldNotMove(t *testing.T) {
	fresh, stale := 2.0, 600.0
	synced := func(name string, age float64) *ferryv1.LinkGroup {
		return &ferryv1.LinkGroup{Group: name, Outcome: "moved", HasSyncAge: true, SyncAgeSeconds: age, Partitions: []*ferryv1.LinkGroupPartition{
			{Topic: "orders", Partition: 0, SourceOffset: 80, TargetOffset: 81, StandsForSourceOffset: 80, SyncedReadAtUnixMs: time.Now().UnixMilli()}}}
	}
	for _, c := range []struct {
		name  string
		group *ferryv1.LinkGroup
		says  string
	}{
		{"synced", synced("app", fresh), ""},
		{"owned", &ferryv1.LinkGroup{Group: "theirs", Outcome: "owned", Detail: "orders/0 at 3 committed by another client",
			Partitions: []*ferryv1.LinkGroupPartition{{Topic: "orders", Partition: 0, SourceOffset: 10, TargetOffset: -1, StandsForSourceOffset: -1}}},
			"group theirs: last sync owned"},
		{"active", &ferryv1.LinkGroup{Group: "busy", Outcome: "active", Detail: "2 members",
			Partitions: []*ferryv1.LinkGroupPartition{{Topic: "orders", Partition: 0, SourceOffset: 10, TargetOffset: -1, StandsForSourceOffset: -1}}},
			"group busy: last sync active"},
		{"without a position", &ferryv1.LinkGroup{Group: "late", Outcome: "moved", Partitions: []*ferryv1.LinkGroupPartition{
			{Topic: "orders", Partition: 0, SourceOffset: 80, TargetOffset: 81, StandsForSourceOffset: 80},
			{Topic: "orders", Partition: 1, SourceOffset: 40, TargetOffset: -1, StandsForSourceOffset: -1, Note: "before_index"}}},
			"group late has no position from Ferry on orders/1 (before_index)"},
		{"stale", synced("slow", stale), "group slow follows a source read 10m0s old, above 1m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := running()
			l.groups = []*ferryv1.LinkGroup{c.group}
			ft := startFakes(t, l, &fakeWriter{})
			// The fake's one shard has no stream: an unhealthy link already,
			// which the group's problem must join.
			code, out, errOut := ft.run(t, nil, "status", "east")
			if c.says == "" {
				if strings.Contains(errOut, "group ") {
					t.Errorf("a synced, fresh group named unhealthy: %s", errOut)
				}
				return
			}
			if code != exitUnhealthy || !strings.Contains(errOut, c.says) {
				t.Errorf("status exited %d: %s%s; want %d saying %q", code, out, errOut, exitUnhealthy, c.says)
			}
		})
	}
}
