package tracing

import "testing"

// Untraced batches are looked at less and less often, 1, 3, 7... batches
// apart up to MaxProbeSkip; a traced one brings back a look at every batch;
// partitions are apart.
func TestRecordProbeBacksOffWhereNothingIsTraced(t *testing.T) {
	p := NewRecordProbe()
	var gaps []int
	gap := 0
	for range 2000 {
		if !p.Look("t", 0) {
			gap++
			continue
		}
		gaps = append(gaps, gap)
		gap = 0
		p.Saw("t", 0, false)
	}
	want := []int{0, 1, 3, 7, 15, 31, 63, 127, 255, 255}
	for i, w := range want {
		if gaps[i] != w {
			t.Fatalf("gaps between looks %v, want %v first", gaps[:len(want)], want)
		}
	}
	looks := len(gaps)
	if looks > 2000/MaxProbeSkip+10 {
		t.Errorf("%d looks in 2000 untraced batches", looks)
	}
	if !p.Look("t", 1) {
		t.Error("another partition's first batch was not looked at")
	}

	// A traced batch: every batch is looked at again.
	for !p.Look("t", 0) {
	}
	p.Saw("t", 0, true)
	for i := range 5 {
		if !p.Look("t", 0) {
			t.Fatalf("batch %d after a traced one was not looked at", i)
		}
		p.Saw("t", 0, true)
	}
}
