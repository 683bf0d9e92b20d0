package verify

import "testing"

func TestCompareCountsEachAnomaly(t *testing.T) {
	src := []rec{{1, 10}, {2, 20}, {3, 30}, {4, 40}}
	tests := []struct {
		name string
		dst  []rec
		want Result
	}{
		{"perfect", []rec{{1, 10}, {2, 20}, {3, 30}, {4, 40}}, Result{Produced: 4, Replicated: 4}},
		{"missing", []rec{{1, 10}, {2, 20}, {4, 40}}, Result{Produced: 4, Replicated: 3, Missing: 1}},
		{"duplicate after restart", []rec{{1, 10}, {2, 20}, {2, 20}, {3, 30}, {4, 40}}, Result{Produced: 4, Replicated: 5, Duplicates: 1}},
		{"reordered", []rec{{1, 10}, {3, 30}, {2, 20}, {4, 40}}, Result{Produced: 4, Replicated: 4, Reordered: 1}},
		{"corrupt value", []rec{{1, 10}, {9, 20}, {3, 30}, {4, 40}}, Result{Produced: 4, Replicated: 4, Corrupt: 1, Missing: 1}},
		{"leaked aborted", []rec{{1, 10}, {2, 20}, {3, 30}, {4, 40}, {5, 50}}, Result{Produced: 4, Replicated: 5, Corrupt: 1, Leaked: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			compare(&got, src, tt.dst)
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got.OK() != (tt.name == "perfect") {
				t.Fatalf("OK() = %v", got.OK())
			}
		})
	}
}
