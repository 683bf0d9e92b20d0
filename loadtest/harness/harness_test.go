package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashes: a race report, a panic or a fatal runtime error anywhere in
// a process's log is found, the earliest first; Ferry's own log lines,
// even those naming a panic, are not.
func TestCrashes(t *testing.T) {
	const line = "time=2026-12-02T14:13:12Z level=INFO msg=\"shard acquired\" note=\"panic: not a crash\"\n"
	for _, tc := range []struct {
		name, log, want string
	}{
		{name: "clean", log: line + line},
		{name: "panic", log: line + "panic: runtime error: integer divide by zero\n\ngoroutine 112 [running]:\n", want: "panic: runtime error: integer divide by zero"},
		{name: "panic first", log: "panic: at start\n", want: "panic: at start"},
		{name: "fatal", log: line + "fatal error: concurrent map writes\n", want: "fatal error: concurrent map writes"},
		{name: "race before a panic", log: line + "==================\nWARNING: DATA RACE\nWrite at 0x00c\n" + line + "panic: later\n", want: "WARNING: DATA RACE\nWrite at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Process{Name: "fetcher-0", LogPath: filepath.Join(t.TempDir(), "fetcher-0.log")}
			if err := os.WriteFile(p.LogPath, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			got := p.Crashes()
			if tc.want == "" {
				if got != "" {
					t.Fatalf("Crashes = %q, want none", got)
				}
				return
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("Crashes = %q, want it to start with %q", got, tc.want)
			}
		})
	}
	if got := (&Process{LogPath: filepath.Join(t.TempDir(), "none.log")}).Crashes(); got != "" {
		t.Fatalf("a missing log: Crashes = %q", got)
	}
}
