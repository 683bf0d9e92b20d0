package recordbatch

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSetProducer rewrites a 1 MiB LZ4 batch of incompressible values
// (a replicator's worst case: nothing shrinks, every byte goes under the
// CRC). CheckCRC on the same batch is the cost of one pass over it, which is
// what SetProducer should stay near.
func BenchmarkSetProducer(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([]Record, 1024)
	for i := range recs {
		v := make([]byte, 1000)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		recs[i] = Record{Timestamp: baseTS + int64(i), Key: []byte("key"), Value: v}
	}
	batch := mustBuild(b, recs, LZ4)
	b.Logf("batch of %d bytes", len(batch))

	b.Run("SetProducer", func(b *testing.B) {
		b.SetBytes(int64(len(batch)))
		b.ReportAllocs()
		var seq int32
		for b.Loop() {
			if err := SetProducer(batch, 1000, 1, seq, false); err != nil {
				b.Fatal(err)
			}
			seq += int32(len(recs))
		}
	})
	b.Run("CheckCRC", func(b *testing.B) {
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if err := CheckCRC(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBuild builds a small batch (100 records of about 200 bytes) with
// each codec, reusing the destination as a producer would.
func BenchmarkBuild(b *testing.B) {
	recs := manyRecords(100)
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			dst := mustBuild(b, recs, c)
			b.SetBytes(int64(len(recordsBytes(b, recs))))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = Build(dst[:0], recs, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecords decodes the same small batches.
func BenchmarkRecords(b *testing.B) {
	recs := manyRecords(100)
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			batch := mustBuild(b, recs, c)
			b.SetBytes(int64(len(recordsBytes(b, recs))))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Records(batch, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
