package observability

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// The checked-in dashboard is the one the code builds, as checkgenerate
// does for pkg/gen: an edit of either alone fails here.
func TestDashboardJSONUpToDate(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("ferry-dashboard.json")
	if err != nil {
		t.Fatalf("%v: run `make dashboard` and commit", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("ferry-dashboard.json differs from what dashboard.go builds: run `make dashboard` and commit")
	}
}

// The dashboard imports into any Grafana: it has the datasource and link
// variables, and every panel and query reads the chosen datasource rather
// than one of the author's.
func TestDashboardUsesItsVariables(t *testing.T) {
	b, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *ref   `json:"datasource"`
			Targets    []struct {
				Datasource *ref   `json:"datasource"`
				Expr       string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Equal(vars, []string{"datasource", "link"}) {
		t.Errorf("variables %v, want [datasource link]", vars)
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if !p.Datasource.chosen() || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %v, %d queries; want ${datasource} and at least one", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			if !q.Datasource.chosen() {
				t.Errorf("panel %q: query %q reads datasource %v, want ${datasource}", p.Title, q.Expr, q.Datasource)
			}
		}
	}
}

type ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func (r *ref) chosen() bool { return r != nil && r.Type == "prometheus" && r.UID == "${datasource}" }
