package provenance

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// sources are the writer's and the fetcher's TLS material of one
// development CA: the writer's signs, the fetcher's (which admits the
// writer's identity) verifies.
func sources(t testing.TB) (writer, fetcher *tlsconfig.Source) {
	t.Helper()
	dir := t.TempDir()
	if _, err := devcerts.WriteDir(dir, devcerts.Options{Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	src := func(tier, peer string) *tlsconfig.Source {
		s, err := tlsconfig.NewSource(tlsconfig.Config{
			CertFile: filepath.Join(dir, tier+".pem"), KeyFile: filepath.Join(dir, tier+"-key.pem"),
			CAFile: filepath.Join(dir, "ca.pem"), AllowedIDs: []string{devcerts.SPIFFEID(devcerts.DefaultTrustDomain, peer)},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return src("writer", "fetcher"), src("fetcher", "writer")
}

// Whoever else can produce to the registry cannot make a fetcher skip an
// application's batches: an entry naming the application's producer id as
// copied from the link's target is not taken unless an admitted writer
// signed it: unsigned, signed by a certificate of another identity (the
// fetcher's own, same CA), or a writer's signature moved onto another
// entry. The writer's own signed entry is taken, and the forged ones come
// first, so "the first valid entry wins" cannot be won by a forgery.
func TestForgedEntriesAreNotTaken(t *testing.T) {
	_, opts := fake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := createTopic(ctx, t, opts)
	writerSrc, fetcherSrc := sources(t)

	forge := func(id int64, signer Signer) *kgo.Record {
		t.Helper()
		rec, err := encodeEntry(Entry{ProducerID: id, SourceCluster: "target", Link: "east", Writer: "mallory", Time: time.Now()}, signer)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	unsigned := forge(100, nil)
	otherIdentity := forge(101, fetcherSrc)
	moved := forge(102, nil)
	moved.Headers = forge(7, writerSrc).Headers // a valid signature, of another entry
	early := forge(7, nil)                      // the writer's own id, claimed first, from elsewhere
	early.Value = []byte(`{"producer_id":7,"source_cluster":"elsewhere","link":"east","writer":"mallory","time":"2026-01-01T00:00:00Z"}`)
	if err := cl.ProduceSync(ctx, unsigned, otherIdentity, moved, early).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecorder(opts, "writer-1", writerSrc, KeyByStream)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if err := rec.Record(ctx, 7, "east", 0, "target"); err != nil {
		t.Fatal(err)
	}

	v, err := NewView(opts, fetcherSrc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := v.Origins(ctx, []int64{100, 101, 102, 7}, "target")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]Origin{100: NotCopied, 101: NotCopied, 102: NotCopied, 7: CopiedFrom} {
		if got[id] != want {
			t.Errorf("producer id %d: %v, want %v", id, got[id], want)
		}
	}
	if n := v.Refused(); n != 4 {
		t.Errorf("%d records refused, want the 4 forged", n)
	}

	// Without TLS on the link (loopback), nothing can be verified: the
	// View takes entries as they are, the forged ones too.
	plain := newView(t, opts)
	got, err = plain.Origins(ctx, []int64{100}, "target")
	if err != nil {
		t.Fatal(err)
	}
	if got[100] != CopiedFrom {
		t.Errorf("unverified view: producer id 100 %v, want %v", got[100], CopiedFrom)
	}
}
