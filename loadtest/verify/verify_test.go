package verify

import (
	"reflect"
	"testing"
)

func TestCompareCountsEachAnomaly(t *testing.T) {
	src := []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}}
	tests := []struct {
		name string
		dst  []rec
		want Result
	}{
		{"perfect", []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4}},
		{"missing", []rec{{1, 10, 0}, {2, 20, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 3, Missing: 1}},
		{"duplicate after restart", []rec{{1, 10, 0}, {2, 20, 1}, {2, 20, 7}, {3, 30, 8}, {4, 40, 9}}, Result{Produced: 4, Replicated: 5, Duplicates: 1,
			FirstDuplicates: []Duplicate{{Topic: "t", Partition: 3, Offset: 7, First: 1}}}},
		{"reordered", []rec{{1, 10, 0}, {3, 30, 0}, {2, 20, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4, Reordered: 1}},
		{"corrupt value", []rec{{1, 10, 0}, {9, 20, 0}, {3, 30, 0}, {4, 40, 0}}, Result{Produced: 4, Replicated: 4, Corrupt: 1, Missing: 1}},
		{"leaked aborted", []rec{{1, 10, 0}, {2, 20, 0}, {3, 30, 0}, {4, 40, 0}, {5, 50, 0}}, Result{Produced: 4, Replicated: 5, Corrupt: 1, Leaked: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			compare(&got, "t", 3, src, tt.dst)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got.OK() != (tt.name == "perfect") {
				t.Fatalf("OK() = %v", got.OK())
			}
		})
	}
}
