package partkey

import "testing"

func TestParseTakesOnlyTheWritersSpelling(t *testing.T) {
	k := Key{Link: "east", Topic: "orders", Partition: 7}
	if got, ok := Parse(k.String()); !ok || got != k {
		t.Fatalf("Parse(%q) = %+v, %v", k.String(), got, ok)
	}
	for _, s := range []string{"east/orders/07", "east/orders/+7", "east/orders/-1", "east//7", "/orders/7", "east/orders", "east/or/ders/7", "barrier/w1", "east/orders/x"} {
		if got, ok := Parse(s); ok {
			t.Errorf("Parse(%q) = %+v: a spelling the writer never writes", s, got)
		}
	}
}

func TestPartitionOfIsStable(t *testing.T) {
	k := Key{Link: "east", Topic: "orders", Partition: 7}
	// FNV-1a of "east/orders/7" mod 50, as the checkpoint topic has
	// always placed it: records written by earlier writers must be found
	// where they are.
	if got := PartitionOf(k, 50); got != 8 {
		t.Fatalf("PartitionOf = %d, want 8", got)
	}
}
