package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	"github.com/ferry-replicator/ferry/services/writer/inprocess"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-metrics, which sarama uses, starts a process-wide meter ticker.
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)
}

// target is two real writers (their whole app) of link east on one kfake
// target, over mutual TLS with development certificates, admitting the
// ferryctl certificate's identity to their control plane.
type target struct {
	dir     string
	seeds   []string // the target cluster's bootstrap servers
	writers []*inprocess.Writer
	cluster *kfake.Cluster
}

func startTarget(t *testing.T, opts ...func(*inprocess.Options)) target {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	tg := target{dir: dir, seeds: cluster.ListenAddrs(), cluster: cluster}
	for _, id := range []string{"w1", "w2"} {
		o := inprocess.Options{
			ID: id, Target: cluster.ListenAddrs(), CertDir: dir, Links: []string{"east"},
			ControlIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl")},
		}
		for _, f := range opts {
			f(&o)
		}
		tg.writers = append(tg.writers, inprocess.Start(t, o))
	}
	return tg
}

// run runs ferryctl verb as tier's certificate against both writers and
// returns its exit code, stdout and stderr.
func (tg target) run(t *testing.T, tier string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(tg.argv(tier, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// argv is ferryctl's command line for verb args as tier's certificate
// against both writers.
func (tg target) argv(tier string, args ...string) []string {
	verb := 1 // the verb, and a subcommand's name after it
	if args[0] == "offsets" {
		verb = 2
	}
	full := append(slices.Clone(args[:verb]),
		"--cert", filepath.Join(tg.dir, tier+".pem"), "--key", filepath.Join(tg.dir, tier+"-key.pem"), "--ca", filepath.Join(tg.dir, "ca.pem"),
		"--writer-id", devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "writer"), "--timeout", "20s")
	for _, w := range tg.writers {
		full = append(full, "--writer", w.Addr)
	}
	return append(full, args[verb:]...)
}

func (tg target) status(t *testing.T) Report {
	t.Helper()
	code, out, errOut := tg.run(t, "ferryctl", "status", "east", "-o", "json")
	if code != exitOK && code != exitUnhealthy {
		t.Fatalf("status exited %d: %s", code, errOut)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if len(rep.Links) != 1 || rep.Links[0].Name != "east" || len(rep.Links[0].Writers) != 2 {
		t.Fatalf("status %+v, want link east from both writers", rep)
	}
	return rep
}

// ferryctl's verbs against real writers: status merges both writers and
// exits 3 while no fetcher serves a shard; pause, resume and failover go
// through one writer and are read back by both; failover --dry-run changes
// nothing; every verb answers -o json and --help; refusals exit 1.
func TestVerbsAgainstWriters(t *testing.T) {
	tg := startTarget(t)

	rep := tg.status(t)
	if l := rep.Links[0]; l.State != linkstate.Running || rep.Healthy || len(l.Shards) != 8 || !strings.Contains(l.Problems[0], "no active stream") {
		t.Fatalf("status of a link no fetcher serves: %+v", rep)
	}
	if code, _, errOut := tg.run(t, "ferryctl", "status", "east"); code != exitUnhealthy || !strings.Contains(errOut, "unhealthy") {
		t.Fatalf("status exited %d (%s), want %d", code, errOut, exitUnhealthy)
	}

	code, out, errOut := tg.run(t, "ferryctl", "pause", "east", "--reason", "maintenance", "-o", "json")
	if code != exitOK {
		t.Fatalf("pause exited %d: %s", code, errOut)
	}
	var ch Change
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		t.Fatal(err)
	}
	if ch.State != linkstate.Paused || ch.Generation != 1 || len(ch.Writers) != 2 || len(ch.Pending) != 0 {
		t.Fatalf("pause answered %+v, want paused at generation 1 read back by both writers", ch)
	}
	rep = tg.status(t)
	if l := rep.Links[0]; l.State != linkstate.Paused || l.Reason != "maintenance" || !rep.Healthy ||
		l.By != devcerts.SPIFFEID(devcerts.DefaultTrustDomain, "ferryctl") || l.Writers[tg.writers[1].Addr] != 1 {
		t.Fatalf("status after pause: %+v", rep)
	}

	if code, out, errOut = tg.run(t, "ferryctl", "failover", "east", "--unplanned", "--dry-run"); code != exitOK || !strings.Contains(out, "DRY RUN") {
		t.Fatalf("failover --dry-run exited %d: %s%s", code, out, errOut)
	}
	if l := tg.status(t).Links[0]; l.State != linkstate.Paused || l.Generation != 1 {
		t.Fatalf("failover --dry-run changed the link: %+v", l)
	}
	if code, _, errOut = tg.run(t, "ferryctl", "resume", "east"); code != exitOK {
		t.Fatalf("resume exited %d: %s", code, errOut)
	}
	if code, out, errOut = tg.run(t, "ferryctl", "failover", "east", "--unplanned", "--yes", "-o", "json"); code != exitOK {
		t.Fatalf("failover exited %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &ch); err != nil || ch.State != linkstate.FailedOver || ch.Generation != 3 {
		t.Fatalf("failover answered %+v (%v)", ch, err)
	}

	// A fetcher's certificate may not change a link.
	if code, _, errOut = tg.run(t, "fetcher", "pause", "east"); code != exitFailed || !strings.Contains(errOut, "PermissionDenied") ||
		!strings.Contains(errOut, "control.allowed_ids") {
		t.Fatalf("pause as the fetcher exited %d: %s", code, errOut)
	}
	if code, _, errOut = tg.run(t, "ferryctl", "pause", "west"); code != exitFailed || !strings.Contains(errOut, `"west"`) {
		t.Fatalf("pause of an unknown link exited %d: %s", code, errOut)
	}
	for _, v := range []string{"status", "pause", "resume", "failover"} {
		var out, errOut bytes.Buffer
		if code := Run([]string{v, "--help"}, &out, &errOut); code != exitOK || !strings.Contains(errOut.String(), "Usage: ferryctl "+v) {
			t.Errorf("%s --help exited %d: %s", v, code, errOut.String())
		}
	}
	if code, _, _ := tg.run(t, "ferryctl", "pause"); code != exitUsage {
		t.Errorf("pause without a link exited %d, want %d", code, exitUsage)
	}
	var sink bytes.Buffer
	if code := Run([]string{"explode"}, &sink, &sink); code != exitUsage {
		t.Errorf("an unknown verb exited %d, want %d", code, exitUsage)
	}
}
