package groupsync

import (
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"billing", true},
		{"orders.consumer-1_é", true},
		{strings.Repeat("g", MaxNameBytes), true},
		{"", false},
		{strings.Repeat("g", MaxNameBytes+1), false},
		{"bad\xffutf8", false},
		{"new\nline", false},
	} {
		if err := CheckName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestMarkerIsFerry(t *testing.T) {
	if m := Marker(42); m != "ferry:v1:42" || !IsFerry(m) || IsFerry("app metadata") {
		t.Fatalf("Marker(42) = %q", m)
	}
}

func TestParseMarker(t *testing.T) {
	for _, tc := range []struct {
		metadata string
		want     int64
		ok       bool
	}{
		{Marker(0), 0, true},
		{Marker(1 << 40), 1 << 40, true},
		{"", 0, false},
		{"app metadata", 0, false},
		{MarkerPrefix, 0, false},
		{MarkerPrefix + "-3", 0, false},
		{MarkerPrefix + "12x", 0, false},
	} {
		if got, ok := ParseMarker(tc.metadata); got != tc.want || ok != tc.ok {
			t.Errorf("ParseMarker(%q) = %d, %v; want %d, %v", tc.metadata, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReread(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		source, standsFor, committed int64
		want                         int64
	}{
		{"read since the last sync", 120, 100, 500, 20},
		{"nothing read since", 100, 100, 500, 0},
		{"read past the copy: the rest is lost, not re-read", 700, 100, 500, 400},
		{"committed end not known", 700, 100, -1, 600},
		{"position ahead of the read (a group moved back)", 90, 100, 500, 0},
		{"nothing copied yet", 120, 100, 0, 0},
	} {
		if got := Reread(tc.source, tc.standsFor, tc.committed); got != tc.want {
			t.Errorf("%s: Reread(%d, %d, %d) = %d, want %d", tc.name, tc.source, tc.standsFor, tc.committed, got, tc.want)
		}
	}
}
