package shard

import (
	"errors"
	"fmt"

	"github.com/ferry-replicator/ferry/services/fetcher/internal/discovery"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/rawfetch"
)

// ReasonSourceTruncated: the source partition's log no longer holds
// records the shard copied. An unclean leader election elected a replica
// that lacked them, and the log goes on from below the fetcher's position
// with other records (KIP-320's divergence): the target holds records the
// source does not, and the source's new records at those offsets were
// never copied. Always a stop, whatever link.on_data_loss says: going on
// would copy the source's records at offsets the target already holds
// others for.
const ReasonSourceTruncated = "source_truncated"

// maxEpochStarts bounds the leader epochs an epochLog keeps per
// partition; leader elections are rare, and the oldest matter least.
const maxEpochStarts = 64

// epochLog is where the leader epochs of a partition began in what the
// runner read of it, across its sessions, up to end (one past the last
// offset read): Kafka's leader epoch cache, as far as the reads saw it. A
// new session asks the source with it whether the writer's resume offset
// is still in the log (rawfetch.Reader.Resume), and a divergence says
// with it where the copied records stop being the source's.
type epochLog struct {
	starts []rawfetch.EpochStart
	end    int64
}

// note adds what a round of the partition read.
func (l *epochLog) note(res rawfetch.Result) {
	for _, e := range res.Epochs {
		if n := len(l.starts); n == 0 || e.Epoch > l.starts[n-1].Epoch {
			l.starts = append(l.starts, e)
		}
	}
	if n := len(l.starts); n > maxEpochStarts {
		l.starts = l.starts[n-maxEpochStarts:]
	}
	if len(l.starts) > 0 {
		l.end = max(l.end, res.Next)
	}
}

// epochAt is the leader epoch of the record at off, if the runner read it.
func (l *epochLog) epochAt(off int64) (int32, bool) {
	if len(l.starts) == 0 || off < l.starts[0].Start || off >= l.end {
		return -1, false
	}
	e := l.starts[0].Epoch
	for _, s := range l.starts {
		if s.Start > off {
			break
		}
		e = s.Epoch
	}
	return e, true
}

// divergence is the first offset at which what was read is no longer the
// source's: where the leader's log of the divergence's epoch ends, or,
// when the leader never had the epoch read last, where the first epoch
// above the one it has began in what was read, if that is earlier.
func (l *epochLog) divergence(d *rawfetch.Divergence) int64 {
	at := min(d.EndOffset, d.Position)
	if d.Epoch < d.LastEpoch {
		for _, s := range l.starts {
			if s.Epoch > d.Epoch {
				at = min(at, s.Start)
				break
			}
		}
	}
	return at
}

// epochs is p's epoch log, made on first use. Only the fetch loop of the
// runner's one session at a time uses it.
func (r *Runner) epochs(p discovery.Partition) *epochLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.epochLogs == nil {
		r.epochLogs = map[discovery.Partition]*epochLog{}
	}
	l := r.epochLogs[p]
	if l == nil {
		l = &epochLog{}
		r.epochLogs[p] = l
	}
	return l
}

// truncated is the stop of a partition whose source log diverged from
// what the shard read, if err says so: the target holds source offsets
// [divergence, sent) that the source no longer has.
func (r *Runner) truncated(p discovery.Partition, err error, sent int64) *StopError {
	var d *rawfetch.Divergence
	if !errors.As(err, &d) {
		return nil
	}
	at := r.epochs(p).divergence(d)
	return &StopError{Reason: ReasonSourceTruncated, Err: fmt.Errorf(
		"the source log diverged at offset %d, below the fetcher's position %d (an unclean leader election truncated it): the target holds source offsets [%d, %d) that the source no longer has, and the source's records from %d on are not copied: %w",
		at, d.Position, at, max(at, sent), at, err)}
}
