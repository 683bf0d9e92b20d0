// Package recordbatch reads, builds and rewrites Apache Kafka record batches
// (magic v2, KIP-98) as raw bytes, the format Kafka keeps on disk and sends
// in fetch and produce requests.
//
// Ferry forwards a source batch to the target cluster as it was fetched
// whenever it can: the records bytes, compressed or not, are never touched,
// so what the target stores is what the source stored. SetProducer rewrites
// only what the target must see differently: the base offset (the target
// assigns its own), the partition leader epoch, the producer id, epoch and
// base sequence (the target deduplicates by them), the transactional bit,
// and the CRC that covers them. The batches that cannot pass through are
// decoded with Records and rebuilt with Build; among them the batches a
// compacted source's cleaner stamped with a delete horizon
// (Info.DeleteHorizon): a rebuilt batch never carries one.
//
// Legacy message sets (magic 0 and 1, written before Kafka 0.11) have no
// v2 batch to pass on: FromLegacy converts a run of legacy messages into
// one uncompressed v2 batch keeping their offsets, gaps included, keys,
// values and timestamps (-1 for magic 0, and a LogAppendTime batch for
// LogAppendTime messages), decompressing compressed messages (gzip,
// snappy, lz4).
//
// Invariants:
//
//   - Parse, Split, CheckCRC, SetProducer and Records accept magic v2 only;
//     legacy message sets (magic 0 and 1) are refused, never misread.
//   - FromLegacy checks the CRC-32 of every message it converts, inner
//     messages included, before using any of it, and keeps each record's
//     source offset: a base offset and offset deltas, with the gaps.
//   - Split's batches alias the fetched bytes and are capped at their own
//     end, so appending to one cannot overwrite the next.
//   - SetProducer checks the CRC it replaces: a batch damaged on the way is
//     refused rather than resealed with a fresh, matching CRC.
//   - Build writes what Apache Kafka's own producer writes: CreateTime, the
//     codec's framing as Kafka frames it (xerial framing for snappy, the LZ4
//     frame format with 64 KiB blocks, plain gzip and zstd frames), producer
//     id, epoch and base sequence -1, ready for SetProducer.
//   - Records, AddBatch and FromLegacy never inflate past their bound
//     (AddBatch's is its limit): a record count the bound cannot hold
//     (MinRecordSize each) and sizes a codec declares are checked before
//     anything is decompressed, zstd windows above 8 MiB (which the
//     decoder would allocate whole) are refused, and streams are cut one
//     byte past the bound. Over it: ErrTooLarge.
//   - Null and empty keys, values and header values stay distinct: nil is
//     null, a non-nil empty slice is empty.
package recordbatch
