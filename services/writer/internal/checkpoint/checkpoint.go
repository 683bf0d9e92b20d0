// Package checkpoint keeps each source partition's committed progress in a
// compacted topic of the target cluster: the next source offset to copy and
// where the last copied record landed in the target.
//
// A Store tails the whole topic into memory for the writer's lifetime. Reads
// must never see a stale view, because a shard may have moved here from
// another writer that committed more since: Sync produces a barrier record
// to every partition of the topic and waits until the tail has read past
// it. Kafka orders the barrier after every checkpoint written before it, and
// a read_committed tail returns it only once all earlier transactions are
// resolved, so after Sync the view holds every committed checkpoint.
//
// Records are signed by the writer that writes them (signed.go): anyone
// else able to produce to the topic could otherwise move a partition's
// resume point, and a tombstone would send it back to start_from. The
// tail verifies lazily: a record that moves its key forward on the same
// source topic is kept as it is, and verified only when an open reads it
// (Get); anything else is verified as it is read, and ignored unless it
// verifies (the replay guard, apply).
package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
	"github.com/ferry-replicator/ferry/services/writer/internal/partkey"

	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Checkpoint is one partition's committed progress.
type Checkpoint struct {
	// NextSourceOffset is the next source offset to copy.
	NextSourceOffset int64 `json:"next_source_offset"`
	// TargetOffset is the target offset after the last copied record.
	TargetOffset int64 `json:"target_offset"`
	// SourceTopicID is the source topic's Kafka ID, when known, so a topic
	// recreated under the same name is not resumed from this checkpoint.
	SourceTopicID []byte `json:"source_topic_id,omitempty"`
	// Epoch is the shard epoch that wrote it; Writer and Time are for people.
	Epoch  uint64    `json:"epoch"`
	Writer string    `json:"writer"`
	Time   time.Time `json:"time"`
	// Unindexed are the offset index records (package offsetindex's
	// encoding) of the rounds up to this checkpoint that were not yet
	// known to be in the index topic when it was written: the writer
	// writes the index once an offset_index.flush_interval, and until then
	// a round's index rides, signed, in its checkpoint, committed with the
	// data as the index topic would have it.
	Unindexed [][]byte `json:"unindexed,omitempty"`
	// CopiedNext is, on a checkpoint failback moved to the old source's
	// end (MoveAll with keepCopied), the next source offset the copy had
	// committed before the move: what the target holds, which the
	// failover meter and a failback run again go on reporting (the
	// stranded tail is remembered, not recomputed from the moved
	// checkpoint). A shard's next round writes a checkpoint without it.
	CopiedNext *int64 `json:"copied_next,omitempty"`
	// Landmarks are where the partition's records stand in the offset
	// index topic (offsetindex.Landmark, at most offsetindex.MaxLandmarks,
	// thinned with age): a translation of an old offset reads the index
	// from the one below it. They only shorten reads: a wrong one costs a
	// read from the log start, never a wrong answer.
	Landmarks []offsetindex.Landmark `json:"landmarks,omitempty"`
}

// Copied is the next source offset the copy itself committed: CopiedNext
// when an operator moved the checkpoint past it, else NextSourceOffset.
func (cp Checkpoint) Copied() int64 {
	if cp.CopiedNext != nil {
		return *cp.CopiedNext
	}
	return cp.NextSourceOffset
}

// Key identifies a source partition within a link; its record key is
// link/topic/partition (package partkey, shared with the offset index and
// heartbeat topics).
type Key = partkey.Key

const barrierPrefix = "barrier/"

// Store is the in-memory view of the checkpoint topic.
type Store struct {
	topic      string
	partitions int32
	writer     string
	client     sarama.Client
	consumer   sarama.Consumer
	barrier    sarama.SyncProducer
	log        *slog.Logger

	signer         Signer   // nil: records unsigned (tls.insecure)
	verifier       Verifier // nil: nothing verified (tls.insecure)
	acceptUnsigned bool
	metrics        Metrics
	// maxUnverified bounds unverifiedBytes (signed.go, "Bounded"); 0:
	// unbounded (tests that build a Store by hand).
	maxUnverified int64

	mu sync.Mutex
	// cond is broadcast as the tail reads.
	cond *sync.Cond
	// cps holds each key's latest record the tail took (apply).
	cps map[Key]*entry
	// unsigned counts the keys whose latest record carries no signature.
	unsigned int
	// unverifiedBytes is what the latest records of cps that are not
	// verified hold (entry.cost): at most maxUnverified.
	unverifiedBytes int64
	read            []int64 // per topic partition: the highest offset the tail has read
	err             error   // set when a tail fails; the store is then unusable
	// failed is closed with err set: the view cannot recover (a tail lost
	// its position), and only a new store, reading the topic from its
	// start, can serve again.
	failed chan struct{}
	// foreign rate-limits the log of records with foreign keys, refused
	// that of records refused (unreadable, unverified, replayed).
	foreign, refused sampledLog
	// controls holds each link's latest verified control record
	// (control.go), and ctlChanged is closed at its next change (nil
	// until someone waits).
	controls   map[string]Control
	ctlChanged chan struct{}

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// Options configure a Store.
type Options struct {
	Topic             string
	Partitions        int32
	ReplicationFactor int16
	// Writer identifies this writer in barrier records.
	Writer string
	// Signer signs the records Record and Forget build, and Verifier
	// verifies what the tail reads; both nil with tls.insecure, where
	// nothing is signed or verified.
	Signer   Signer
	Verifier Verifier
	// AcceptUnsigned takes an unsigned latest checkpoint at Get, with a
	// warning (checkpoints of writers older than signing, while they are
	// upgraded).
	AcceptUnsigned bool
	// MaxUnverifiedBytes bounds the memory of the records the view keeps
	// without having verified them (signed.go, "Bounded"); 0:
	// DefaultMaxUnverifiedBytes.
	MaxUnverifiedBytes int64
	// Metrics count what the store refuses and accepts unsigned; nil
	// counters are not counted.
	Metrics Metrics
}

// Metrics are the store's counters.
type Metrics struct {
	// Refused counts records the tail ignored, by reason: unreadable,
	// unsigned, unsigned_tombstone, unverified, replayed.
	Refused *prometheus.CounterVec
	// AcceptedUnsigned counts unsigned checkpoints Get took under
	// AcceptUnsigned.
	AcceptedUnsigned prometheus.Counter
}

// Open makes sure the topic exists, compacted, and starts tailing it with
// its own client built from base.
func Open(addrs []string, base *sarama.Config, opts Options, log *slog.Logger) (*Store, error) {
	cfg := *base
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Return.Errors = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	client, err := sarama.NewClient(addrs, &cfg)
	if err != nil {
		// The first connection the writer makes to the target: name the
		// cluster, so a TLS or SASL refusal says which settings to fix.
		return nil, fmt.Errorf("target cluster %v: checkpoint client: %w", addrs, err)
	}
	parts, err := ensureTopic(client, opts)
	if err != nil {
		client.Close()
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("checkpoint consumer: %w", err)
	}
	barrier, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		consumer.Close()
		client.Close()
		return nil, fmt.Errorf("checkpoint barrier producer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		topic: opts.Topic, partitions: parts, writer: opts.Writer,
		client: client, consumer: consumer, barrier: barrier, log: log,
		signer: opts.Signer, verifier: opts.Verifier, acceptUnsigned: opts.AcceptUnsigned, metrics: opts.Metrics,
		maxUnverified: cmp.Or(opts.MaxUnverifiedBytes, DefaultMaxUnverifiedBytes),
		cps:           map[Key]*entry{}, read: make([]int64, parts), stop: cancel,
	}
	s.cond = sync.NewCond(&s.mu)
	s.failed = make(chan struct{})
	for p := range parts {
		s.read[p] = -1
		pc, err := consumePartition(consumer, opts.Topic, p)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("tail checkpoint partition %d: %w", p, err)
		}
		s.wg.Add(1)
		go s.tail(ctx, p, pc)
	}
	return s, nil
}

// ensureTopic creates the compacted topic if missing and returns its
// partition count, which may differ from the configured one if it existed.
func ensureTopic(client sarama.Client, opts Options) (int32, error) {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return 0, fmt.Errorf("checkpoint admin: %w", err)
	}
	// The admin shares the store's client, which Close releases; closing the
	// admin here would close the client too.
	err = admin.CreateTopic(opts.Topic, &sarama.TopicDetail{
		NumPartitions:     opts.Partitions,
		ReplicationFactor: opts.ReplicationFactor,
		ConfigEntries:     map[string]*string{"cleanup.policy": ptr("compact")},
	}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("create checkpoint topic %s: %w", opts.Topic, err)
	}
	if err := refreshMetadata(client, opts.Topic); err != nil {
		return 0, fmt.Errorf("checkpoint topic metadata: %w", err)
	}
	parts, err := client.Partitions(opts.Topic)
	if err != nil {
		return 0, fmt.Errorf("checkpoint topic partitions: %w", err)
	}
	return int32(len(parts)), nil
}

func ptr[T any](v T) *T { return &v }

// refreshMetadata reads the topic's metadata, retrying for a while while
// the broker does not know it yet: a topic just created is known to the
// controller before every broker's metadata cache has it (a writer started
// on a new cluster failed here, 2026-12-02).
func refreshMetadata(client sarama.Client, topic string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := client.RefreshMetadata(topic)
		if err == nil || time.Now().After(deadline) ||
			!(errors.Is(err, sarama.ErrUnknownTopicOrPartition) || errors.Is(err, sarama.ErrLeaderNotAvailable)) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// consumePartition starts the tail, retrying for a while: a topic just
// created, or a broker just restarted, may not have a leader yet.
func consumePartition(c sarama.Consumer, topic string, p int32) (sarama.PartitionConsumer, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err == nil || time.Now().After(deadline) {
			return pc, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (s *Store) tail(ctx context.Context, p int32, pc sarama.PartitionConsumer) {
	defer s.wg.Done()
	defer pc.AsyncClose()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-pc.Errors():
			if err == nil {
				continue
			}
			// sarama reports transient errors (leader moves, broker
			// restarts) and retries them itself; only a lost position is
			// fatal for the view.
			if errors.Is(err.Err, sarama.ErrOffsetOutOfRange) {
				s.fail(fmt.Errorf("tail checkpoint partition %d: %w", p, err))
				return
			}
			s.log.Warn("checkpoint tail error; retrying", "partition", p, "err", err)
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			s.apply(p, m)
		}
	}
}

func (s *Store) apply(p int32, m *sarama.ConsumerMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.read[p] = m.Offset
	s.cond.Broadcast()
	key := string(m.Key)
	if strings.HasPrefix(key, barrierPrefix) {
		return
	}
	if link, ok := parseControlKey(key); ok {
		s.applyControl(link, p, m)
		return
	}
	k, ok := partkey.Parse(key)
	if !ok {
		if n, ok := s.foreign.allow(); ok {
			s.log.Warn("ignoring checkpoint record with a foreign key", "key", key, "partition", p, "offset", m.Offset, "suppressed_before", n)
		}
		return
	}
	e := &entry{partition: p, offset: m.Offset, value: m.Value}
	for _, h := range m.Headers {
		if h == nil {
			continue
		}
		e.sig.ReadHeader(string(h.Key), h.Value)
		if string(h.Key) == headerForgets {
			e.forgets = h.Value
		}
	}
	if m.Value != nil {
		if err := json.Unmarshal(m.Value, &e.cp); err != nil {
			s.refuse(k, e, "unreadable", err)
			return
		}
	}
	s.take(k, e)
}

func (s *Store) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.failed)
		s.log.Error("checkpoint store failed", "err", err)
	}
	s.cond.Broadcast()
}

// Sync waits until the view holds every checkpoint committed before it was
// called (see the package comment).
func (s *Store) Sync(ctx context.Context) error {
	msgs := s.barriers()
	if err := s.barrier.SendMessages(msgs); err != nil {
		return fmt.Errorf("checkpoint barrier: %w", err)
	}
	// Wake the waiter below when ctx ends; sync.Cond has no context.
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cond.Broadcast()
	})
	defer stop()
	// And every syncWarn, to log what a long wait waits for: the barrier
	// is read only once the partition's last stable offset passes it, so a
	// transaction still open before it holds it back.
	tickDone := make(chan struct{})
	defer close(tickDone)
	go func() {
		tick := time.NewTicker(syncWarn)
		defer tick.Stop()
		for {
			select {
			case <-tickDone:
				return
			case <-tick.C:
				s.mu.Lock()
				s.cond.Broadcast()
				s.mu.Unlock()
			}
		}
	}()
	start, logged := time.Now(), time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		for s.read[m.Partition] < m.Offset {
			if s.err != nil {
				return s.err
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("checkpoint sync: waiting for partition %d to pass offset %d (read up to %d): %w",
					m.Partition, m.Offset, s.read[m.Partition], err)
			}
			if time.Since(logged) >= syncWarn {
				logged = time.Now()
				s.log.Warn("checkpoint sync slow: barrier not readable yet (a transaction still open before it?)",
					"partition", m.Partition, "barrier_offset", m.Offset, "read", s.read[m.Partition], "waited", time.Since(start).Round(time.Second))
			}
			s.cond.Wait()
		}
	}
	return s.err
}

// syncWarn is how long Sync waits before it logs what it waits for.
const syncWarn = 10 * time.Second

// barriers returns one barrier record for each partition of the checkpoint
// topic. The view skips them; Sync uses them to know how far it has read.
func (s *Store) barriers() []*sarama.ProducerMessage {
	msgs := make([]*sarama.ProducerMessage, s.partitions)
	for p := range s.partitions {
		msgs[p] = &sarama.ProducerMessage{
			Topic: s.topic, Partition: p,
			Key: sarama.StringEncoder(barrierPrefix + s.writer),
		}
	}
	return msgs
}

// Get returns the partition's checkpoint as of the last Sync or later. A
// checkpoint that is unsigned (unless AcceptUnsigned) or does not verify
// is an *UnverifiedError: the caller must stop the partition, never start
// it as if it had none.
func (s *Store) Get(k Key) (Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cps[k]
	if !ok {
		return Checkpoint{}, false, nil
	}
	err := s.check(k, e)
	if e.value == nil { // a tombstone that did not verify, with nothing before it (take)
		if err == nil || s.acceptUnsigned && !e.signed() {
			// It verifies now (the signers' CA fixed since), or is an
			// operator's forget from before signing.
			return Checkpoint{}, false, nil
		}
		err = fmt.Errorf("the latest record is a tombstone that does not verify, and compaction may have erased the checkpoint before it: %w", err)
	} else if errors.Is(err, tlsconfig.ErrUnsigned) && s.acceptUnsigned {
		// Written by a writer older than signing: taken while
		// checkpoints.accept_unsigned is on, and signed at the
		// partition's next commit.
		s.log.Warn("accepting an unsigned checkpoint (checkpoints.accept_unsigned)", "key", k.String(), "partition", e.partition, "offset", e.offset)
		if c := s.metrics.AcceptedUnsigned; c != nil {
			c.Inc()
		}
		return e.cp, true, nil
	}
	if err != nil {
		return Checkpoint{}, true, &UnverifiedError{Key: k, Topic: s.topic, Partition: e.partition, Offset: e.offset, Err: err}
	}
	return e.cp, true, nil
}

// Record is a checkpoint as a record of the checkpoint topic.
type Record struct {
	Partition  int32
	Key, Value []byte
	Time       time.Time
	// Headers carry the record's signature (none without a Signer).
	Headers []tlsconfig.Header
}

// Record builds the signed record that commits cp for k; the caller
// produces it, after (at-least-once) or with (exactly-once) the data it
// covers. Its partition follows from the key alone, so a source
// partition's checkpoints stay in order in one partition.
func (s *Store) Record(k Key, cp Checkpoint) (Record, error) {
	value, _ := json.Marshal(cp) // a struct of numbers and strings cannot fail
	return s.signed(k, value, cp.Time)
}

// PartitionOf is the checkpoint partition of k's records.
func (s *Store) PartitionOf(k Key) int32 { return s.partitionOfKey(k.String()) }

// partitionOfKey is the checkpoint partition of the records of a key.
func (s *Store) partitionOfKey(key string) int32 {
	return partkey.Place(key, s.partitions)
}

// Failed is closed when the store has failed for good (Err says why).
func (s *Store) Failed() <-chan struct{} { return s.failed }

// Topic is the checkpoint topic's name.
func (s *Store) Topic() string { return s.topic }

// Partitions is the checkpoint topic's partition count.
func (s *Store) Partitions() int32 { return s.partitions }

// Close stops the tail.
func (s *Store) Close() {
	s.stop()
	s.wg.Wait()
	s.barrier.Close()
	s.consumer.Close()
	s.client.Close()
}

// Err reports why the view failed, nil while it is healthy. A failed view
// never recovers: readiness reports it until the writer restarts.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
