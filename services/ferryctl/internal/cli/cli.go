// Package cli is ferryctl: one verb per operator action on a link, each
// talking to the writers' ControlService over mutual TLS. Every writer of
// a target shares a link's state (a signed record in the checkpoint
// topic), so a change goes to one writer and is then awaited on all the
// writers named; status asks every writer and merges what they know.
//
// The verbs that cannot be undone cannot be misfired: failover names its
// form (--planned or --unplanned), the unplanned one asks the person at
// the terminal to type "yes" after showing what it loses (--yes for
// scripts), and resume refuses a failed-over link unless --force.
//
// Exit codes, the same for every verb (docs/operations.md repeats them):
//
//	0  done: the action completed and every report is whole.
//	1  failed: the action was not done. A writer refused it or none
//	   answered; ferryctl's own check refused it (a planned failover
//	   not ready or timed out, resume of a failed_over link without
//	   --force, failback of a link not failed_over, failback
//	   --move-groups refused for every group); the operator declined
//	   the confirmation; offsets translate named no offset.
//	2  usage: a command line or configuration ferryctl cannot run,
//	   failover without exactly one of --planned and --unplanned
//	   included, and failover --unplanned without --yes where no one
//	   can confirm (stdin not a terminal, no input, or -o json).
//	3  unhealthy (status): done, and a link is unhealthy or a writer
//	   did not answer.
//	4  partial: done, but not whole; the report is printed, and the
//	   error says what is missing. A writer that has not read a change
//	   back (pending) or did not answer the report's read; the failover
//	   meter unread after a failover; a selected group a failover left
//	   without a target position on some partition (owned or active on
//	   the target, or named under reread_uncounted); failback
//	   --move-groups that refused or could not read some groups, or
//	   selected none; a failback report lacking a group's positions, or
//	   whose reverse link start was not set after the checkpoints moved;
//	   offsets translate --group naming some partitions' source offsets
//	   but not all.
//
// Under -o json nothing ferryctl writes is plain text: stdout holds the
// verb's result alone, one JSON document (on exit 4 too), and stderr JSON
// lines: progress ({"verb","progress"}) and, on any exit but 0, the error
// ({"verb","error","exit_code"}, Failure), last.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/service"
)

// Exit codes (the package comment says when each is used).
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitUnhealthy = 3
	exitPartial   = 4
)

// errUsage is a command line ferryctl cannot run; the verb's usage is
// printed with it.
var errUsage = errors.New("usage")

// errBadConfig is a configuration file ferryctl cannot use; it exits as
// a usage error, without the usage.
var errBadConfig = errors.New("bad configuration")

// errUnhealthy is a verb that did what it was asked and found a link
// unhealthy.
var errUnhealthy = errors.New("unhealthy")

// errPartial is a verb that did what it could, whose outcome or report
// is not whole: the error says what is missing.
var errPartial = errors.New("partial")

// exits maps the errors a verb returns to exit codes, first match wins;
// any other error is exitFailed.
var exits = []struct {
	err  error
	code int
}{
	{errUsage, exitUsage},
	{errBadConfig, exitUsage},
	{errUnconfirmed, exitUsage},
	{errUnhealthy, exitUnhealthy},
	{errPartial, exitPartial},
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	for _, e := range exits {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return exitFailed
}

// Failure is how ferryctl reports an error under -o json: one JSON line
// on stderr, its last.
type Failure struct {
	Verb     string `json:"verb"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// verb is one subcommand.
type verb struct {
	name, args, summary string
	// flags adds the verb's own flags; run runs it.
	flags func(fs *flag.FlagSet, o *verbOpts)
	run   func(ctx context.Context, c *client, o *verbOpts, args []string, stdout io.Writer) error
}

// verbOpts are the verbs' own flags.
type verbOpts struct {
	watch      bool
	interval   time.Duration
	staleAfter time.Duration
	// groupStaleAfter is status's bound on a group's sync age.
	groupStaleAfter time.Duration
	reason          string
	dryRun          bool
	groups          string
	// planned and unplanned are failover's two forms, one of them
	// required; yes confirms the unplanned one without asking.
	planned, unplanned, yes bool
	// force resumes a failed_over link.
	force bool
	// sourceConfig and copyStranded are failback's.
	sourceConfig string
	copyStranded bool
	// moveGroups and allowBackwards are failback's runbook step 3.
	moveGroups     bool
	allowBackwards bool
	// reverseLink, reverseWriters and reverseIDs name the reverse link and
	// the old source's writers that serve it (failback runbook step 2);
	// countLimit bounds the stranded tail counted per partition.
	reverseLink    string
	reverseWriters multi
	reverseIDs     multi
	countLimit     int64
	// dial connects to other writers than --writer (the reverse link's),
	// with the same certificate.
	dial func(writers, ids multi) (*client, error)
	// env is the environment (failback loads the fetcher's configuration
	// under it, as the fetcher does).
	env []string
	// progress is where a long wait says what it waits for (stderr, JSON
	// lines under -o json).
	progress io.Writer
	// stdin and prompt are where a confirmation is asked (stderr) and
	// answered.
	stdin  io.Reader
	prompt io.Writer
}

var verbs = []verb{
	{name: "status", args: "[LINK]", summary: "show links, shards, owners, epochs, committed offsets, lag and the failover meter",
		flags: func(fs *flag.FlagSet, o *verbOpts) {
			fs.BoolVar(&o.watch, "watch", false, "show the status again every --interval until interrupted")
			fs.DurationVar(&o.interval, "interval", 2*time.Second, "the refresh interval of --watch")
			fs.DurationVar(&o.staleAfter, "stale-after", 10*time.Second, "a heartbeat older than this makes its link unhealthy (ten heartbeat intervals by default)")
			fs.DurationVar(&o.groupStaleAfter, "group-stale-after", time.Minute, "a synced group whose position follows a source read older than this makes its link unhealthy (six link.groups.interval by default)")
		}, run: runStatus},
	{name: "pause", args: "LINK", summary: "stop every fetcher of LINK copying; they keep their leases",
		flags: reasonFlag, run: stateVerb(linkstate.Paused)},
	{name: "resume", args: "LINK", summary: "let the fetchers of LINK copy again, from the committed checkpoints; a failed_over link only with --force (after failback)",
		flags: func(fs *flag.FlagSet, o *verbOpts) {
			reasonFlag(fs, o)
			fs.BoolVar(&o.force, "force", false, "resume a failed_over link: it copies what its checkpoints have not, the stranded tail included unless ferryctl failback moved them past it")
		}, run: runResume},
	{name: "failover", args: "LINK", summary: "refuse every stream of LINK for good (the target takes over) and print what the source held that the target lacks and where each group stands; --planned or --unplanned says how",
		flags: func(fs *flag.FlagSet, o *verbOpts) {
			reasonFlag(fs, o)
			fs.BoolVar(&o.planned, "planned", false, "the source is reachable and its producers and consumers stopped: drain the link and sync the groups first, then fail over (RPO 0); --timeout bounds the wait")
			fs.BoolVar(&o.unplanned, "unplanned", false, "the source region is lost: fail over now; what the target lacks is lost (printed first, then a confirmation is asked unless --yes)")
			fs.BoolVar(&o.yes, "yes", false, "with --unplanned: fail over without asking (scripts, CI: nobody is there to type yes)")
			fs.BoolVar(&o.dryRun, "dry-run", false, "print the records and seconds at risk per partition and each group's position, and change nothing")
			fs.StringVar(&o.groups, "groups", "", "only the consumer groups this regular expression matches (anchored), in the report and the planned wait")
			fs.DurationVar(&o.staleAfter, "stale-after", 5*time.Second, "--planned refuses when a partition's last heartbeat is older than this (the source side is not reporting)")
		}, run: runFailover},
	{name: "failback", args: "LINK", summary: "after a failover, report the old source's stranded tail, where the reverse link starts and where each group stands on the old source, and move the checkpoints to the old source's end (the link stays failed_over); with --move-groups, move the groups back to the old source instead",
		flags: func(fs *flag.FlagSet, o *verbOpts) {
			reasonFlag(fs, o)
			fs.StringVar(&o.sourceConfig, "source-config", "", "the link's fetcher configuration (YAML): its source section reaches the old source (required)")
			fs.BoolVar(&o.dryRun, "dry-run", false, "print the report and change nothing")
			fs.BoolVar(&o.copyStranded, "copy-stranded", false, "leave the checkpoints: once resumed (--force), the link copies the stranded tail into the target, after what was written there since")
			fs.StringVar(&o.groups, "groups", "", "only the consumer groups this regular expression matches (anchored)")
			fs.BoolVar(&o.moveGroups, "move-groups", false, "runbook step 3, the groups' consumers stopped on the target: commit each selected group's exact positions on the old source, and move no checkpoint")
			fs.BoolVar(&o.allowBackwards, "allow-backwards", false, "with --move-groups: also move a group's partition behind where it stands on the old source")
			fs.StringVar(&o.reverseLink, "reverse-link", "", "the reverse link (target to old source), not started yet: set its checkpoint of each target partition at TARGET_START, through --reverse-writer")
			fs.Var(&o.reverseWriters, "reverse-writer", "with --reverse-link: a gRPC host:port of a writer of the old source serving it; repeatable")
			fs.Var(&o.reverseIDs, "reverse-writer-id", "with --reverse-link: an identity the old source's writers' certificates may present (default: those of --writer-id); repeatable")
			fs.Int64Var(&o.countLimit, "count-limit", 1_000_000, "count the records of a stranded tail of at most this many offsets (read_committed, within --timeout); 0: count none")
		}, run: runFailback},
	offsetsListing,
}

func reasonFlag(fs *flag.FlagSet, o *verbOpts) {
	fs.StringVar(&o.reason, "reason", "", "why, for the record (shown by status)")
}

// Run runs ferryctl with args (without the program name) and returns its
// exit code. Nothing can be confirmed: there is no stdin.
func Run(args []string, stdout, stderr io.Writer) int {
	return RunContext(context.Background(), args, nil, nil, stdout, stderr)
}

// RunContext is Run with a context (--watch runs until it ends), the
// environment (FERRY_CTL_*) and stdin, where failover --unplanned reads
// its confirmation (interactive says from which readers).
func RunContext(ctx context.Context, args, env []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := session{env: env, stdin: stdin, stdout: stdout, stderr: stderr, dial: (*conn).dial}
	return s.run(ctx, args)
}

// session is one run of ferryctl: its streams, its environment and how it
// reaches the writers.
type session struct {
	env            []string
	stdin          io.Reader
	stdout, stderr io.Writer
	// dial connects to the writers a conn names (conn.dial); the tests
	// reach in-process ControlServices through it.
	dial func(c *conn, env []string) (*client, error)
}

func (s session) run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(s.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "version" {
		fmt.Fprintln(s.stdout, service.Version("ferryctl"))
		return exitOK
	}
	if args[0] == offsetsListing.name {
		return s.runOffsets(ctx, args[1:])
	}
	for _, v := range verbs {
		if v.name == args[0] {
			return s.runVerb(ctx, v, args[1:])
		}
	}
	err := fmt.Errorf("%w: unknown verb %q", errUsage, args[0])
	if wantsJSON(args[1:]) {
		return s.fail(args[0], true, err)
	}
	fmt.Fprintf(s.stderr, "ferryctl: %v\n\n", err)
	usage(s.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: ferryctl VERB [flags] [args]\n\nVerbs:")
	for _, v := range verbs {
		fmt.Fprintf(w, "  %-9s %-7s %s\n", v.name, v.args, v.summary)
	}
	fmt.Fprintln(w, "\nEvery verb takes --writer, --writer-id, --cert, --key, --ca, --config and -o; 'ferryctl VERB --help' lists them.")
	fmt.Fprintln(w, "Exit codes: 0 done, 1 failed (nothing done), 2 usage, 3 a link is unhealthy, 4 partial (done, but not whole: the error says what is missing).")
}

func (s session) runVerb(ctx context.Context, v verb, args []string) int {
	asJSON := wantsJSON(args)
	fs := flag.NewFlagSet("ferryctl "+v.name, flag.ContinueOnError)
	fs.SetOutput(s.stderr)
	if asJSON {
		// The parse error becomes the JSON error below.
		fs.SetOutput(io.Discard)
	}
	var (
		conn conn
		o    verbOpts
	)
	conn.flags(fs)
	v.flags(fs, &o)
	o.env, o.stdin, o.prompt = s.env, s.stdin, s.stderr
	o.dial = func(writers, ids multi) (*client, error) {
		other := conn.others(writers, ids)
		return s.dial(&other, s.env)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ferryctl %s [flags] %s\n\n%s.\n\nFlags:\n", v.name, v.args, capitalize(v.summary))
		fs.PrintDefaults()
	}
	if err := fs.Parse(interleave(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if asJSON { // the flag package wrote the usage nowhere
				fs.SetOutput(s.stderr)
				fs.Usage()
			}
			return exitOK
		}
		if asJSON {
			return s.fail(v.name, true, fmt.Errorf("%w: %v", errUsage, err))
		}
		return exitUsage
	}
	asJSON = conn.output == "json"
	o.progress = s.stderr
	if asJSON {
		o.progress = &jsonLines{w: s.stderr, verb: v.name}
	}
	c, err := s.dial(&conn, s.env)
	if err != nil {
		return s.fail(v.name, asJSON, fmt.Errorf("%w: %v", errBadConfig, err))
	}
	defer c.close()
	err = v.run(ctx, c, &o, fs.Args(), s.stdout)
	code := s.fail(v.name, asJSON, err)
	if errors.Is(err, errUsage) && !asJSON {
		fs.SetOutput(s.stderr)
		fs.Usage()
	}
	return code
}

// fail reports err, if any, as verb's last word on stderr, text or (as
// JSON) a Failure, and returns the exit code.
func (s session) fail(verb string, asJSON bool, err error) int {
	code := exitCode(err)
	switch {
	case err == nil:
	case asJSON:
		line, _ := json.Marshal(Failure{Verb: verb, Error: err.Error(), ExitCode: code})
		fmt.Fprintf(s.stderr, "%s\n", line)
	default:
		fmt.Fprintf(s.stderr, "ferryctl %s: %v\n", verb, err)
	}
	return code
}

// wantsJSON says whether args ask for -o json. It is read before the
// flags are parsed, so that an error parsing them is JSON too.
func wantsJSON(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-o" || a == "--o":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case a == "-o=json" || a == "--o=json":
			return true
		}
	}
	return false
}

// jsonLines writes each line written to it as one JSON object
// {"verb","progress"}: under -o json nothing on stderr is plain text.
type jsonLines struct {
	w    io.Writer
	verb string
	buf  []byte
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.buf = append(j.buf, p...)
	for {
		line, rest, ok := bytes.Cut(j.buf, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		out, _ := json.Marshal(struct {
			Verb     string `json:"verb"`
			Progress string `json:"progress"`
		}{j.verb, string(line)})
		if _, err := fmt.Fprintf(j.w, "%s\n", out); err != nil {
			return 0, err
		}
		j.buf = rest
	}
}

// interleave moves the positional arguments after the flags, so that
// "pause east --reason x" parses as "pause --reason x east" (package flag
// stops at the first positional argument).
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, pos...)
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// oneLink is the single LINK argument of a verb.
func oneLink(args []string) (string, error) {
	if len(args) != 1 || args[0] == "" {
		return "", fmt.Errorf("%w: want exactly one LINK, got %d arguments", errUsage, len(args))
	}
	return args[0], nil
}
