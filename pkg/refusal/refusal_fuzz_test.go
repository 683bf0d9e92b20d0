package refusal

import (
	"testing"
	"unicode/utf8"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzFrom feeds From what a fetcher receives from a writer: any refusal
// the writer can make must come back field for field (a fetcher stops the
// partition it names, with its reason), and any status a peer may send,
// details included, must be read without a panic, and found a refusal only
// when it names a topic and a partition.
func FuzzFrom(f *testing.F) {
	for _, r := range []Refusal{
		{Reason: RecordTooLarge, Topic: "orders", Partition: 3, Offset: 1234, Size: 2 << 20, Limit: 1 << 20, Setting: "producer.max_message_bytes"},
		{Reason: TargetRefused, Topic: "orders", Partition: 1, Offset: 7, Cause: "INVALID_RECORD: ..."},
		{Reason: BatchTooLarge, Topic: "orders", Partition: 2, Offset: 100, Limit: 4 << 20, Setting: "max_batch_bytes"},
	} {
		st, _ := status.FromError(r.Status())
		raw, err := proto.Marshal(st.Proto())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, r.Reason, r.Topic, r.Partition, r.Offset, r.Size, r.Limit, r.Setting, r.Cause)
	}
	f.Fuzz(func(t *testing.T, raw []byte, reason, topic string, partition int32, offset, size, limit int64, setting, cause string) {
		r := Refusal{Reason: reason, Topic: topic, Partition: partition, Offset: offset, Size: size, Limit: limit, Setting: setting, Cause: cause}
		got, ok := From(r.Status())
		valid := topic != ""
		for _, s := range []string{reason, topic, setting, cause} {
			valid = valid && utf8.ValidString(s) // a protobuf string holds UTF-8 only
		}
		switch {
		case valid && (!ok || got != r):
			t.Fatalf("%+v came back as %+v, %v", r, got, ok)
		case !valid && ok && got.Topic == "":
			t.Fatalf("%+v found a refusal naming no topic", r)
		}

		var sp spb.Status
		if proto.Unmarshal(raw, &sp) != nil {
			return
		}
		if got, ok := From(status.FromProto(&sp).Err()); ok && got.Topic == "" {
			t.Fatalf("a refusal naming no topic from %x", raw)
		}
	})
}
