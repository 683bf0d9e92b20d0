package provenance

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// FuzzDecodeEntry feeds decodeEntry a registry record as anyone able to
// produce to the topic can write it: key, value and the signature headers.
// Without a verifier, what it takes is in bounds, keyed by its stream (or,
// in the old format, its producer id) and encodes back to the same entry. With one, it takes only what the
// writer signed: a forged or altered record never verifies.
func FuzzDecodeEntry(f *testing.F) {
	writerSrc, fetcherSrc := sources(f)
	signed := map[string]bool{} // key and value of every record the writer signed
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	shard := uint32(3)
	for _, e := range []Entry{
		{ProducerID: 7, SourceCluster: "abcdefghijklmnopqrstuv", Link: "east", Shard: &shard, Writer: "writer/1", Time: at},
		{ProducerID: 7, SourceCluster: "abcdefghijklmnopqrstuv", Link: "east", Writer: "writer-1", Time: at},
		{ProducerID: 0, Link: "", Writer: "w", Time: at},
	} {
		rec, err := encodeEntry(e, writerSrc)
		if err != nil {
			f.Fatal(err)
		}
		signed[string(rec.Key)+"\x00"+string(rec.Value)] = true
		f.Add(rec.Key, rec.Value, rec.Headers[0].Value, rec.Headers[1].Value)
	}
	f.Add([]byte("9"), []byte(`{"producer_id":9,"PRODUCER_ID":10,"link":"x","writer":"y","time":"2026-01-01T00:00:00Z"}`), []byte{}, []byte{})
	f.Add([]byte("-1"), []byte(`{"producer_id":-1}`), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, k, value, chain, signature []byte) {
		rec := &kgo.Record{Key: k, Value: value, Headers: []kgo.RecordHeader{
			{Key: tlsconfig.HeaderChain, Value: chain}, {Key: tlsconfig.HeaderSignature, Value: signature},
		}}
		if _, err := decodeEntry(rec, fetcherSrc); err == nil && !signed[string(k)+"\x00"+string(value)] {
			t.Fatalf("a record the writer did not sign verified: key %q, value %q", k, value)
		}
		e, err := decodeEntry(rec, nil)
		if err != nil {
			return
		}
		if e.check() != nil || string(k) != e.StreamKey() || e.Shard == nil && !bytes.Equal(k, key(e.ProducerID)) {
			t.Fatalf("took %+v under key %q", e, k)
		}
		again, err := encodeEntry(e, nil)
		if err != nil {
			t.Fatalf("the entry taken does not encode: %v", err)
		}
		back, err := decodeEntry(again, nil)
		if err != nil || back.ProducerID != e.ProducerID || back.Link != e.Link || back.Writer != e.Writer ||
			back.SourceCluster != e.SourceCluster || !back.Time.Equal(e.Time) || (back.Shard == nil) != (e.Shard == nil) ||
			back.Shard != nil && *back.Shard != *e.Shard {
			t.Fatalf("%+v encodes and decodes to %+v (%v)", e, back, err)
		}
	})
}
