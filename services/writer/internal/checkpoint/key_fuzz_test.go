package checkpoint

import (
	"encoding/json"
	"testing"
)

// FuzzCheckpointRecord feeds the store's reading of a checkpoint record
// what anyone able to produce to the checkpoint topic can write. A key is
// taken only in the one spelling the writer writes it (Key.String): the
// topic is compacted by record key, so a second spelling of a partition's
// key ("l/t/07" beside "l/t/7") would be kept apart from the writer's own
// records, outlive the tombstone that forgets the partition and come back
// on the next start. A value taken encodes back to what it decoded to.
func FuzzCheckpointRecord(f *testing.F) {
	f.Add("east/orders/7", []byte(`{"next_source_offset":10,"target_offset":4,"epoch":2,"writer":"w1","time":"2026-12-03T08:00:00Z"}`))
	f.Add("east/orders/07", []byte(`{}`))
	f.Add("east/orders/+7", []byte(`{"source_topic_id":"AAEC"}`))
	f.Add("east/orders/-0", []byte(`null`))
	f.Add("barrier/w1", []byte{})
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if k, ok := parseKey(key); ok && k.String() != key {
			t.Fatalf("key %q taken as %+v, which the writer spells %q", key, k, k.String())
		}
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
