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
