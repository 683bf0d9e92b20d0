// Package rawfetch reads source partitions as raw Kafka record batches, the
// bytes the broker stores, so the fetcher can pass them to a writer without
// decompressing or rebuilding them.
//
// Legacy message sets (magic 0 and 1: what Kafka stored before 0.11, and
// what a broker with an old log.message.format.version still stores) are
// served by brokers as they are stored, and have no v2 batch to pass on:
// each run of consecutive legacy messages is converted into one
// uncompressed v2 batch (recordbatch.FromLegacy) that keeps their offsets,
// gaps included, keys, values and timestamps (-1 for magic 0; a
// LogAppendTime message makes a LogAppendTime batch). Only these are
// decompressed here.
//
// A Reader runs rounds through its Fetcher: Fetch is given partitions and
// the offsets to read from, sends one FetchRequest per partition leader,
// all at once, and returns what each partition gave. It keeps no
// positions of its own; the caller owns them and passes each Result's Next
// back in the next round. That keeps the fetcher's resume point where
// Ferry wants it: in the caller, which resumes from what the writer says
// the target committed. Each owner of partitions (a shard's loop) has a
// Reader of its own, over one Fetcher shared by all: the Fetcher holds
// what they share (the client, leaders and topic ids), a Reader the order
// its requests name its partitions in, rotated each of its rounds. A
// broker returns a batch larger than the limits only as the first batch
// of the first partition with data (KIP-74), so every partition has to
// come first in its turn; with one rotation for all owners, another
// shard's rounds decided the order, and a partition could starve.
//
// A Result sorts what went wrong in two. Retry is for problems a later
// round gets past by itself (the leader moved, a connection failed, a
// retriable broker error): Fetch looks the leader up again where that
// helps, and the caller just fetches again. Err is for what fetching again
// will not change (out of range, a damaged batch or legacy message, a
// legacy message that cannot be converted, an authorization failure):
// what to do is the caller's decision.
//
// Leaders and topic ids are cached from MetadataRequests and looked up
// again only for partitions whose leader was found stale. A topic deleted
// and created again under its name is read by its new id once the old one
// is refused (UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID: a Retry, and the
// topic looked up again): the offsets asked then belong to the new topic.
// So each Result says which topic it came from (TopicID), and the caller,
// which knows the id it started with, tells a recreated topic apart. By
// id (Fetch v13+) the id is the one the request named. By name (up to
// v12) a broker serves whatever topic has the name now, so after such a
// fetch the same leader is asked for the topic's metadata, which it has
// applied before serving the new topic: one MetadataRequest per round
// that gave something, on brokers before Kafka 3.1 or a client capped
// below v13.
//
// Requests are read_committed (isolation level 1) and sessionless (fetch
// session id 0, epoch -1), with replica id -1. Without a session every
// request names all its partitions, which costs a few bytes per partition
// and spares tracking session state across leader moves and errors.
//
// Leader epochs (KIP-320), as Kafka's consumer uses them: each partition
// is fetched with its leader epoch from metadata (CurrentLeaderEpoch), so
// a broker leading in another epoch refuses the fetch (FENCED_LEADER_EPOCH,
// UNKNOWN_LEADER_EPOCH: a Retry, the leader looked up again), and with the
// leader epoch of the last batch the Reader read of it at the asked offset
// (LastFetchedEpoch; -1 when the caller asks an offset the Reader did not
// return as Next). A leader whose log does not continue that epoch up to
// the offset answers DivergingEpoch (v12+); after a fenced epoch, and for
// a position given with Resume, the Reader asks OffsetForLeaderEpoch
// before it fetches (any version). Either answer showing that the log
// diverged from what was read (an unclean election truncated it) is a
// Result Err wrapping a *Divergence (ErrDiverged), and nothing of the
// partition is read that round.
//
// Fetch version: topics are sent both by name and by topic id, so
// whichever version kgo negotiates with the broker (v4 up to v18, the
// highest kmsg knows) works, and the caller need not cap anything with
// kgo.MaxVersions. Responses up to v12 name their topics; from v13 they
// carry topic ids, which are mapped back through the metadata the request
// was built from. A topic metadata gives no id (a broker before Kafka 2.8,
// or Metadata capped below v10) cannot be named in a v13+ request; such a
// broker does not offer v13, but should it happen, that partition's Err
// says so, and capping Fetch at v12 with kgo.MaxVersions is the way out.
//
// Invariants:
//
//   - A Result's Batches are each exactly one complete magic v2 batch, in
//     offset order, with a CRC that matches: the control, transactional
//     and producer fields the filtering relies on are under the CRC, so a
//     damaged header is never mistaken for a marker and dropped.
//   - No control batch and no batch of an aborted transaction is returned.
//     Which batches are aborted is decided from batch headers and the
//     response's aborted transaction list alone; no v2 batch is
//     decompressed. Legacy message sets have no transactions.
//   - Nothing of a legacy message is passed on unless its CRC-32 matches,
//     and the CRCs of all its inner messages if it is compressed.
//   - Next never goes back: it is the asked offset or one past the last
//     complete batch seen, whether that batch was returned or dropped. A
//     partial batch or legacy message at the end of a response is left out
//     and read whole in a later round.
//   - The first batch may start before the asked offset, because Kafka
//     returns whole batches (and compressed legacy messages whole);
//     batches that end before it are left out.
//   - Fetch starts no goroutine that outlives it: the per-leader requests
//     run in goroutines it waits for, and ctx ends them.
package rawfetch
