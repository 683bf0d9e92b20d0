package ports

import (
	"net"
	"strconv"
	"testing"
)

// Free hands out distinct ports below the ephemeral range that can then be
// bound, for UDP too when asked.
func TestFree(t *testing.T) {
	got, err := Free(6, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range got {
		if p < portMin || p > portMax {
			t.Errorf("port %d outside %d-%d", p, portMin, portMax)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("tcp %s: %v", addr, err)
			continue
		}
		l.Close()
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Errorf("udp %s: %v", addr, err)
			continue
		}
		u.Close()
	}
	if len(got) != 6 {
		t.Fatalf("got %d ports, want 6", len(got))
	}
}

// A port this process holds is not handed out again, here or to another
// process consulting the same reservations (the lock is per open file, so
// a second open in this process stands for another process).
func TestFreeReservesAcrossProcesses(t *testing.T) {
	got, err := Free(1, false)
	if err != nil {
		t.Fatal(err)
	}
	if reserve(got[0]) {
		t.Fatalf("port %d reserved twice", got[0])
	}
	for range 200 {
		more, err := Free(1, false)
		if err != nil {
			t.Fatal(err)
		}
		if more[0] == got[0] {
			t.Fatalf("port %d handed out again while reserved", got[0])
		}
	}
}
