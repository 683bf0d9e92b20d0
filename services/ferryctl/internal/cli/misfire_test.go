package cli

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

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
	const tail = "orders/0 (12 records, source offsets [88, 100))"

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

// Under -o json every error is one JSON line on stderr, its last, with
// the verb and the exit code, whatever the kind (usage, a flag that does
// not parse, an unknown verb, configuration, a refusal);
// progress is JSON lines too; stdout holds the result alone, if any.
func TestErrorsAreJSON(t *testing.T) {
	l := running()
	l.control = control(ferryv1.LinkState_LINK_STATE_FAILED_OVER, 3)
	failedOver := startFakes(t, l, &fakeWriter{})
	live := startFakes(t, running(), &fakeWriter{})
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
