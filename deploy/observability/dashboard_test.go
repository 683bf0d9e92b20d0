package observability

import (
	"bytes"
	"os"
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
