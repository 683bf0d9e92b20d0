package offsetindex

import (
	"bytes"
	"testing"
)

// FuzzIndexRecord feeds Decode what anyone able to produce to the index
// topic can write. A value taken is one Append gives back byte for byte
// (one spelling per entry), holds at most MaxRuns runs ascending on both
// sides within int64, and merges into an index whose translations stay
// within the runs (no panic, no answer before the index's start).
func FuzzIndexRecord(f *testing.F) {
	for _, e := range []Entry{
		{From: 0, Next: 0, TargetBefore: -1},
		{From: 100, Next: 110, TargetBefore: -1, Runs: []Run{{100, 0, 10}}},
		{From: 110, Next: 118, TargetBefore: 10, Runs: []Run{{110, 12, 1}, {112, 13, 2}, {117, 15, 1}}},
		{From: 1 << 40, Next: 1<<40 + 9000, TargetBefore: 1 << 39, Runs: []Run{{1 << 40, 1<<39 + 2, 4096}, {1<<40 + 5000, 1<<39 + 4098, 4000}}},
	} {
		raw, err := e.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{Version, 0x8a, 0x00, 0, 0, 0})
	f.Add([]byte{Version, 0, 0, 0x81, 0x20, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := Decode(raw)
		if err != nil {
			return
		}
		again, err := e.Append(nil)
		if err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("%x decodes to %+v, which encodes as %x (%v)", raw, e, again, err)
		}
		if len(e.Runs) > MaxRuns {
			t.Fatalf("%d runs taken", len(e.Runs))
		}
		src, tgt := e.From, max(e.TargetBefore, 0)
		for i, r := range e.Runs {
			if r.Count < 1 || r.Source < src || r.Target < tgt || r.SourceEnd() < r.Source || r.TargetEnd() < r.Target {
				t.Fatalf("run %d %+v after %d->%d", i, r, src, tgt)
			}
			src, tgt = r.SourceEnd(), r.TargetEnd()
		}
		if e.Next < src {
			t.Fatalf("next %d before the runs' end %d", e.Next, src)
		}
		x := NewIndex()
		x.Add(e)
		for _, s := range []int64{e.From, e.Next, max(src-1, e.From), src} {
			if p, err := x.Translate(s); err != nil || (!p.End && p.Offset < max(e.TargetBefore, 0)) {
				t.Fatalf("Translate(%d) = %+v, %v", s, p, err)
			}
		}
		for _, tg := range []int64{max(e.TargetBefore, 0), max(tgt-1, e.TargetBefore, 0), tgt} {
			if p, err := x.TranslateBack(tg); err != nil || p.Offset < e.From {
				t.Fatalf("TranslateBack(%d) = %+v, %v", tg, p, err)
			}
		}
	})
}
