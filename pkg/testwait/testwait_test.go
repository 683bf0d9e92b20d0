package testwait

import (
	"testing"
	"time"
)

func TestForWaitsForTheCondition(t *testing.T) {
	start := time.Now()
	For(t, 5*time.Second, "100 ms passed", func() bool { return time.Since(start) >= 100*time.Millisecond })
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("For returned before its condition held")
	}
}

// fatalT records a Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f)
}

func TestForFailsAtTheDeadline(t *testing.T) {
	ft := &fatalT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != ft {
				t.Fatalf("For did not fail at its deadline (recovered %v)", r)
			}
		}()
		For(ft, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if ft.msg == "" {
		t.Fatal("no failure message")
	}
}
