// Package batch turns records of one source partition into the compressed,
// checksummed payload that crosses the region boundary, and back.
//
// The fetcher encodes each record once with an Encoder and seals the block
// with a Codecs; the writer opens it with the same Codecs. Open checks
// everything a peer could get wrong or forge before it returns a single
// record: the checksum, the codec, the declared sizes (so a compression bomb
// is refused before it is inflated) and the record framing. A batch either
// opens whole or not at all, so a writer never produces part of a bad batch.
package batch
