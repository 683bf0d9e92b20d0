// Package refusal carries, in a gRPC status, a writer's refusal of one
// source partition: a record the target can never take (too large for it,
// or refused by the target's brokers for what it holds), which no retry
// would cure. The fetcher stops that partition loudly, as it
// does at a retention gap, and keeps the shard's other partitions flowing.
//
// The refusal rides as a google.rpc.ErrorInfo detail of a FailedPrecondition
// status, so a fetcher that does not know it still sees a plain error.
package refusal

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reasons a writer refuses a partition.
const (
	// RecordTooLarge: a record above what the target accepts.
	RecordTooLarge = "RECORD_TOO_LARGE"
	// TargetRefused: the target's brokers refused a record for good
	// (INVALID_RECORD, INVALID_TIMESTAMP, ...); Cause is Kafka's error.
	TargetRefused = "TARGET_REFUSED"
	// BatchTooLarge: a source batch the writer must decompress to
	// rebuild inflates past what it may (Limit, by Setting); Cause says
	// what the batch holds. A compression bomb ends here, and so does a
	// legitimate batch larger than the writer is configured to rebuild.
	BatchTooLarge = "BATCH_TOO_LARGE"
	// CheckpointUnverified: the partition's latest checkpoint in the
	// target is unsigned or its signature does not verify (forged, or
	// signed by a writer the writer's checkpoints.signers do not admit),
	// so the writer cannot say where the partition resumes. Offset is the
	// record's offset in the checkpoint topic, Setting names that topic and
	// partition, Cause says why.
	CheckpointUnverified = "CHECKPOINT_UNVERIFIED"
)

const domain = "ferry-replicator.io"

// Refusal is one refused source partition.
type Refusal struct {
	Reason    string
	Topic     string // source topic
	Partition int32
	// Offset is the source offset of the record refused (BatchTooLarge:
	// the batch's first offset to copy).
	Offset int64
	// Size is the record's size in bytes, Limit what it was above, and
	// Setting the setting (or target config) that sets the limit.
	Size, Limit int64
	Setting     string
	// Cause is the target's error (TargetRefused): Kafka's error name and
	// message; for BatchTooLarge, what the batch holds and inflates to.
	Cause string
}

// Error is the refusal in words: what, where, and why (how big, which
// limit; or the target's error).
func (r Refusal) Error() string {
	switch r.Reason {
	case TargetRefused:
		return fmt.Sprintf("record refused by the target: %s/%d offset %d: %s", r.Topic, r.Partition, r.Offset, r.Cause)
	case CheckpointUnverified:
		return fmt.Sprintf("checkpoint unverified: %s/%d: its checkpoint record (%s offset %d) cannot be trusted: %s",
			r.Topic, r.Partition, r.Setting, r.Offset, r.Cause)
	case BatchTooLarge:
		return fmt.Sprintf("batch too large to rebuild: %s/%d offset %d: %s, above %s %d",
			r.Topic, r.Partition, r.Offset, r.Cause, r.Setting, r.Limit)
	}
	limit := ""
	if r.Limit > 0 {
		limit = fmt.Sprintf(" %d", r.Limit)
	}
	return fmt.Sprintf("record too large: %s/%d offset %d is %d bytes, above %s%s",
		r.Topic, r.Partition, r.Offset, r.Size, r.Setting, limit)
}

// Status is the refusal as a gRPC status error.
func (r Refusal) Status() error {
	st := status.New(codes.FailedPrecondition, r.Error())
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: r.Reason, Domain: domain,
		Metadata: map[string]string{
			"topic": r.Topic, "partition": strconv.Itoa(int(r.Partition)), "offset": strconv.FormatInt(r.Offset, 10),
			"size": strconv.FormatInt(r.Size, 10), "limit": strconv.FormatInt(r.Limit, 10), "setting": r.Setting,
			"cause": r.Cause,
		},
	})
	if err != nil { // only for a detail that cannot marshal, which ErrorInfo always can
		return st.Err()
	}
	return withInfo.Err()
}

// From finds a refusal in err: a status from Status, or an error wrapping a
// Refusal.
func From(err error) (Refusal, bool) {
	var r Refusal
	if errors.As(err, &r) {
		return r, true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return Refusal{}, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != domain {
			continue
		}
		m := info.GetMetadata()
		p, perr := strconv.ParseInt(m["partition"], 10, 32)
		off, oerr := strconv.ParseInt(m["offset"], 10, 64)
		size, _ := strconv.ParseInt(m["size"], 10, 64)
		limit, _ := strconv.ParseInt(m["limit"], 10, 64)
		if perr != nil || oerr != nil || m["topic"] == "" {
			continue
		}
		return Refusal{Reason: info.GetReason(), Topic: m["topic"], Partition: int32(p), Offset: off,
			Size: size, Limit: limit, Setting: m["setting"], Cause: m["cause"]}, true
	}
	return Refusal{}, false
}
