package batch

import (
	"math/rand/v2"
	"testing"

	"github.com/ferry-replicator/ferry/loadtest/workload"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// BenchmarkSealOpen measures each wire codec on one 1 MiB batch of the
// benchmark's records (JSON-like, ~1 KiB): MB/s of Seal and Open and the
// compressed share ("ratio"), the figures behind link.codec's default.
func BenchmarkSealOpen(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var e Encoder
	for i := 0; i < 1000; i++ {
		r := workload.Record(workload.Options{ValueBytes: 1024, Partitions: 8}, rng, i)
		hs := make([]Header, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = Header{Key: []byte(h.Key), Value: h.Value}
		}
		e.Append(int64(i), r.Timestamp.UnixMilli(), r.Key, r.Value, hs)
	}
	c, err := NewCodecs(64 << 20)
	if err != nil {
		b.Fatal(err)
	}
	for _, codec := range []ferryv1.Codec{ferryv1.Codec_CODEC_ZSTD, ferryv1.Codec_CODEC_LZ4, ferryv1.Codec_CODEC_SNAPPY, ferryv1.Codec_CODEC_NONE} {
		b.Run(codec.String()+"/seal", func(b *testing.B) {
			var bt *ferryv1.Batch
			for b.Loop() {
				bt = c.Seal(&e, codec)
			}
			b.SetBytes(int64(len(e.buf)))
			b.ReportMetric(float64(len(bt.Payload))/float64(len(e.buf)), "ratio")
		})
		bt := c.Seal(&e, codec)
		b.Run(codec.String()+"/open", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Open(bt, 64<<20); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(e.buf)))
		})
	}
}
