package checkpoint

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"
)

// FuzzCheckpointRecord feeds the store's reading of a checkpoint record
// what anyone able to produce to the checkpoint topic can write. A key is
// taken only in the one spelling the writer writes it (Key.String): the
// topic is compacted by record key, so a second spelling of a partition's
// key ("l/t/07" beside "l/t/7") would be kept apart from the writer's own
// records, outlive the tombstone that forgets the partition and come back
// on the next start. A value taken encodes back to what it decoded to.
//
// The record's signature headers (chain, signature, the record a tombstone
// forgets) come from the fuzzer too: read after a writer's own signed
// checkpoint of the same key, no such record is ever taken in its place
// or forgets it. It is ignored, or, kept as the key's latest record, makes
// Get refuse it as unverified.
func FuzzCheckpointRecord(f *testing.F) {
	f.Add("east/orders/7", []byte(`{"next_source_offset":10,"target_offset":4,"epoch":2,"writer":"w1","time":"2026-12-03T08:00:00Z"}`), []byte{}, []byte{}, []byte{}, false)
	f.Add("east/orders/07", []byte(`{}`), []byte{}, []byte{}, []byte{}, false)
	f.Add("east/orders/+7", []byte(`{"source_topic_id":"AAEC"}`), []byte{}, []byte{}, []byte{}, false)
	f.Add("east/orders/-0", []byte(`null`), []byte{}, []byte{}, []byte{}, false)
	f.Add("barrier/w1", []byte{}, []byte{}, []byte{}, []byte{}, false)
	f.Add("east/orders/7", []byte(`{"next_source_offset":1000}`), []byte{0x30, 0x82, 0x01}, []byte{1, 2, 3}, []byte{}, false)
	f.Add("east/orders/7", []byte{}, []byte{}, []byte{}, []byte("0/0"), true)
	sg := newSigners(f)
	f.Fuzz(func(t *testing.T, key string, value, chain, signature, forgets []byte, tombstone bool) {
		if k, ok := partkey.Parse(key); ok && k.String() != key {
			t.Fatalf("key %q taken as %+v, which the writer spells %q", key, k, k.String())
		}
		checkSigned(t, sg, value, chain, signature, forgets, tombstone)
		var cp Checkpoint
		if json.Unmarshal(value, &cp) != nil {
			return
		}
		again, err := json.Marshal(cp)
		if err != nil {
			t.Fatalf("checkpoint %+v does not encode: %v", cp, err)
		}
		var back Checkpoint
		if err := json.Unmarshal(again, &back); err != nil || back.NextSourceOffset != cp.NextSourceOffset ||
			back.TargetOffset != cp.TargetOffset || back.Epoch != cp.Epoch || !back.Time.Equal(cp.Time) {
			t.Fatalf("%+v encodes and decodes to %+v (%v)", cp, back, err)
		}
	})
}

// checkSigned reads a fuzzed record of key after the writer's own signed
// checkpoint of it: the writer's checkpoint stays, or Get refuses.
func checkSigned(t *testing.T, sg signers, value, chain, signature, forgets []byte, tombstone bool) {
	s := newTestStore(sg, false)
	s.commit(t, 100, nil)
	if tombstone {
		value = nil
	}
	m := &sarama.ConsumerMessage{Key: []byte(key.String()), Value: value, Offset: 1, Headers: []*sarama.RecordHeader{
		{Key: []byte(tlsconfig.HeaderChain), Value: chain}, {Key: []byte(tlsconfig.HeaderSignature), Value: signature},
		{Key: []byte(headerForgets), Value: forgets},
	}}
	s.apply(0, m)
	cp, ok, err := s.Get(key)
	if err == nil && (!ok || cp.NextSourceOffset != 100) {
		t.Fatalf("after a record nobody admitted signed, Get = %+v, %v; want the writer's checkpoint at 100 or an error", cp, ok)
	}
	if err != nil && !errors.Is(err, ErrUnverified) {
		t.Fatalf("Get: %v, want ErrUnverified", err)
	}
}
