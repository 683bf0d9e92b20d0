package tracing

// RecordProbe decides which passed-through Kafka batches are decoded to
// look for records that carry a trace context (a traceparent header their
// producer set). Only such records get spans of their own, and finding
// them costs decompressing and decoding the batch, the very work passing
// batches through saves; where the source's producers trace nothing,
// looking at every batch is waste. So, per partition: after a decoded
// batch with no traceparent, the next 1, then 3, 7, ... up to MaxProbeSkip
// batches are passed without a look; a batch with one resets the partition
// to looking at every batch. A producer that starts tracing is seen within
// MaxProbeSkip batches of its partition; until then its records have no
// spans of their own (their batches' spans are unaffected).
//
// A RecordProbe is not safe for concurrent use: each stream has its own.
type RecordProbe struct {
	parts map[probeKey]*probeState
}

// MaxProbeSkip is the most batches of a partition passed without a look.
const MaxProbeSkip = 255

type probeKey struct {
	topic     string
	partition int32
}

type probeState struct {
	skip int // batches to pass before the next look
	run  int // the current run length (0 while records carry contexts)
}

// NewRecordProbe returns a probe that looks at every partition's first
// batch.
func NewRecordProbe() *RecordProbe { return &RecordProbe{parts: map[probeKey]*probeState{}} }

// Look reports whether the partition's next batch is to be decoded; a
// false counts that batch as passed.
func (p *RecordProbe) Look(topic string, partition int32) bool {
	s := p.parts[probeKey{topic, partition}]
	if s == nil || s.skip == 0 {
		return true
	}
	s.skip--
	return false
}

// Saw records what a decoded batch of the partition held: whether any of
// its records carries a trace context.
func (p *RecordProbe) Saw(topic string, partition int32, traced bool) {
	k := probeKey{topic, partition}
	s := p.parts[k]
	if s == nil {
		s = &probeState{}
		p.parts[k] = s
	}
	if traced {
		s.skip, s.run = 0, 0
		return
	}
	s.run = min(2*s.run+1, MaxProbeSkip)
	s.skip = s.run
}
