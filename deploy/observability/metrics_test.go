package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
	fetcher "github.com/ferry-replicator/ferry/services/fetcher/inprocess"
	writer "github.com/ferry-replicator/ferry/services/writer/inprocess"
)

// Every metric the dashboard and the rules name is exported by a running
// fetcher and writer after they copied records and synced a group. Names
// are taken from the PromQL with Prometheus's own parser; recording rules
// (defined in ferry-rules.yaml, and checked to be) are not metrics. A name
// the scrapes lack passes only if it is registered at start (the
// registry's Describe: a vector has no series before its first event, a
// data loss or a fencing) and docs/metrics.md lists it.
func TestEveryMetricNamedIsExported(t *testing.T) {
	refs, recorded := namedMetrics(t)
	const link, topic, group = "east", "orders", "billing"
	source, target := cluster(t), cluster(t)
	produce(t, source, topic, 20)
	commitGroup(t, source, group, topic, 10)

	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	w := writer.Start(t, writer.Options{ID: "w1", Target: target.ListenAddrs(), CertDir: dir, Links: []string{link}})
	f := fetcher.Start(t, fetcher.Options{ID: "f1", Source: source.ListenAddrs(), Writers: []string{w.Addr},
		CertDir: dir, Link: link, GroupsInterval: time.Second})

	// The end state: every record copied and the group's position synced
	// (its sync age exists only once a sync moved it or found it there).
	waitFor(t, time.Minute, "20 records written and group "+group+" synced", func() bool {
		fams := scrape(t, w.Admin)
		return sum(fams["ferry_writer_records_total"]) == 20 && fams["ferry_group_sync_age_seconds"] != nil
	})

	scraped := map[string]bool{}
	for _, admin := range []string{w.Admin, f.Admin} {
		for name := range scrape(t, admin) {
			scraped[name] = true
		}
	}
	registered := describe(w.Registry)
	for name := range describe(f.Registry) {
		registered[name] = true
	}
	docs, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range refs {
		if recorded[name] {
			continue
		}
		base := histogramBase(name, scraped, registered)
		switch {
		case scraped[base]:
		case registered[base] && strings.Contains(string(docs), "`"+base):
			t.Logf("%s: registered, no series yet (none before its first event)", base)
		default:
			t.Errorf("%s is named by the dashboard or the rules but exported by neither tier", name)
		}
	}
}

// namedMetrics are the metric names the dashboard's queries and the rules'
// expressions select, and the names the rules record. A selected name
// that looks like a recording rule (level:metric:operations) must be one.
func namedMetrics(t *testing.T) (names []string, recorded map[string]bool) {
	t.Helper()
	exprs, recorded := ruleExprs(t)
	exprs = append(exprs, dashboardExprs(t)...)
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range selectedNames(t, e) {
			if strings.Contains(name, ":") && !recorded[name] {
				t.Errorf("%s looks like a recording rule but ferry-rules.yaml records no such name", name)
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	if len(names) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and the rules: %v", len(names), names)
	}
	return names, recorded
}

func ruleExprs(t *testing.T) ([]string, map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("ferry-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	recorded := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	return exprs, recorded
}

// dashboardExprs are the "expr" fields anywhere in the checked-in JSON
// (panels, rows, variables), with Grafana's variables replaced by what
// PromQL can parse.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("ferry-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					exprs = append(exprs, grafanaVars.Replace(s))
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	// The link variable's query, label_values(metric, label), is
	// Grafana's, not PromQL: its metric is checked as a selector.
	for _, m := range regexp.MustCompile(`label_values\((\w+),`).FindAllStringSubmatch(string(b), -1) {
		exprs = append(exprs, m[1])
	}
	return exprs
}

// selectedNames are the metric names expr's vector selectors name.
func selectedNames(t *testing.T, expr string) []string {
	t.Helper()
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("parse %q: %v", expr, err)
		return nil
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%q selects series without a metric name", expr)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// histogramBase maps a histogram's _bucket, _sum and _count series to the
// histogram's name, as it is registered and scraped.
func histogramBase(name string, known ...map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		for _, k := range known {
			if k[base] {
				return base
			}
		}
	}
	return name
}

// scrape reads the admin port's /metrics as Prometheus does (text format).
func scrape(t *testing.T, admin string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", admin, err)
	}
	return fams
}

// sum adds up a counter or gauge family's series.
func sum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var total float64
	for _, m := range f.GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// describe names every metric reg's collectors describe: also vectors
// without a series yet, which a scrape does not show.
func describe(reg *prometheus.Registry) map[string]bool {
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	// A Desc names its metric only in its String form.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

func cluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func client(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes n records to a new one-partition topic.
func produce(t *testing.T, c *kfake.Cluster, topic string, n int) {
	t.Helper()
	ctx := context.Background()
	cl := client(t, c, kgo.DefaultProduceTopic(topic))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint("record ", i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// commitGroup commits offset as group's position in topic's partition 0
// on the source, for the fetchers to read and the writers to sync.
func commitGroup(t *testing.T, c *kfake.Cluster, group, topic string, offset int64) {
	t.Helper()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: offset, LeaderEpoch: -1})
	resp, err := kadm.NewClient(client(t, c)).CommitOffsets(context.Background(), group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor fails the test unless cond holds within timeout, polling it.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
}
