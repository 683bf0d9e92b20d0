// Package linkstate names the states an operator sets a link to (running,
// paused, failed_over) and carries, in a gRPC status, a writer's refusal
// of a stream because its link is not running. Both tiers share it: the
// writer refuses with Refusal.Status, the fetcher reads it back with From
// and waits (keeping its leases) instead of treating it as a failure.
//
// The refusal rides as a google.rpc.ErrorInfo detail of a
// FailedPrecondition status, as package refusal's do, so a fetcher that
// does not know it still sees a plain error and retries.
package linkstate

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// State is a link's state as an operator sets it.
type State string

const (
	// Running copies as configured; a link no one ever set is running.
	Running State = "running"
	// Paused: writers refuse the link's streams; fetchers keep their
	// leases and retry.
	Paused State = "paused"
	// FailedOver: the target took over from the source; writers refuse
	// the link's streams until an operator sets it running again.
	FailedOver State = "failed_over"
)

// Parse reads a state's name.
func Parse(s string) (State, error) {
	switch st := State(s); st {
	case Running, Paused, FailedOver:
		return st, nil
	}
	return "", fmt.Errorf("link state %q: want running, paused or failed_over", s)
}

// Proto is the state on the wire.
func (s State) Proto() ferryv1.LinkState {
	switch s {
	case Paused:
		return ferryv1.LinkState_LINK_STATE_PAUSED
	case FailedOver:
		return ferryv1.LinkState_LINK_STATE_FAILED_OVER
	}
	return ferryv1.LinkState_LINK_STATE_RUNNING
}

// FromProto reads a state off the wire; UNSPECIFIED and unknown values are
// not states.
func FromProto(p ferryv1.LinkState) (State, bool) {
	switch p {
	case ferryv1.LinkState_LINK_STATE_RUNNING:
		return Running, true
	case ferryv1.LinkState_LINK_STATE_PAUSED:
		return Paused, true
	case ferryv1.LinkState_LINK_STATE_FAILED_OVER:
		return FailedOver, true
	}
	return "", false
}

// Reasons of a refused stream, in the status's ErrorInfo.
const (
	ReasonPaused     = "LINK_PAUSED"
	ReasonFailedOver = "LINK_FAILED_OVER"
)

const domain = "ferry-replicator.io"

// Refusal is a stream refused, or ended, because its link is not running.
type Refusal struct {
	Link  string
	State State
	// Why is the operator's reason, for people.
	Why string
}

// reason is the ErrorInfo reason of the refusal's state.
func (r Refusal) reason() string {
	if r.State == FailedOver {
		return ReasonFailedOver
	}
	return ReasonPaused
}

func (r Refusal) Error() string {
	what := "paused"
	if r.State == FailedOver {
		what = "failed over (the target took over; a stream stays refused until an operator sets the link running)"
	}
	msg := fmt.Sprintf("link %q is %s", r.Link, what)
	if r.Why != "" {
		msg += ": " + r.Why
	}
	return msg
}

// Status is the refusal as a gRPC status error.
func (r Refusal) Status() error {
	st := status.New(codes.FailedPrecondition, r.Error())
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: r.reason(), Domain: domain,
		Metadata: map[string]string{"link": r.Link, "state": string(r.State), "why": r.Why},
	})
	if err != nil { // ErrorInfo always marshals
		return st.Err()
	}
	return withInfo.Err()
}

// From finds a refusal in err: a status from Status, or an error wrapping
// a Refusal.
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
		var state State
		switch info.GetReason() {
		case ReasonPaused:
			state = Paused
		case ReasonFailedOver:
			state = FailedOver
		default:
			continue
		}
		m := info.GetMetadata()
		return Refusal{Link: m["link"], State: state, Why: m["why"]}, true
	}
	return Refusal{}, false
}
