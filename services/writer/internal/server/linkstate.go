package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/linkstate"
	"github.com/ferry-replicator/ferry/services/writer/internal/checkpoint"
	"github.com/ferry-replicator/ferry/services/writer/internal/offsetindex"
)

// A link's state (docs/architecture.md, "Control") is a signed record in
// the checkpoint topic (checkpoint.Control), so every writer of the
// target acts on a change any of them records (package control serves
// the verbs): a link that is not running has its Opens refused (admit,
// and again after the open's checkpoint sync, which a writer started
// later needs) and its open streams ended after they commit what they
// hold (serve), like a drain. The fetcher reads the refusal (package
// linkstate) and waits, keeping its leases.

// linkRefusal is nil while link runs, else the error that refuses (or
// ends) its streams.
func (s *Server) linkRefusal(link string) error {
	c := s.store.Control(link)
	switch c.State {
	case linkstate.Paused:
		return fmt.Errorf("%w: %w", errLinkPaused, linkstate.Refusal{Link: link, State: c.State, Why: c.Reason})
	case linkstate.FailedOver:
		return fmt.Errorf("%w: %w", errLinkFailedOver, linkstate.Refusal{Link: link, State: c.State, Why: c.Reason})
	}
	return nil
}

// LinkState is a link's line in /status.
type LinkState struct {
	Link       string          `json:"link"`
	State      linkstate.State `json:"state"`
	Reason     string          `json:"reason,omitempty"`
	By         string          `json:"by,omitempty"`
	Time       *time.Time      `json:"time,omitempty"`
	Generation uint64          `json:"generation"`
	// IndexGaps are the link's source topics the offset index cannot
	// cover whole, with why (coverage.go).
	IndexGaps map[string]string `json:"index_gaps,omitempty"`
}

// LinkStates lists the state of each of the writer's links.
func (s *Server) LinkStates() []LinkState {
	out := make([]LinkState, 0, len(s.links))
	for name := range s.links {
		c := s.store.Control(name)
		ls := LinkState{Link: name, State: c.State, Reason: c.Reason, By: c.By, Generation: c.Generation}
		for _, g := range s.gaps.of(name) {
			if ls.IndexGaps == nil {
				ls.IndexGaps = map[string]string{}
			}
			ls.IndexGaps[g.GetTopic()] = g.GetReason()
		}
		if !c.Time.IsZero() {
			ls.Time = &c.Time
		}
		out = append(out, ls)
	}
	slices.SortFunc(out, func(a, b LinkState) int { return strings.Compare(a.Link, b.Link) })
	return out
}

// What the control plane (package control) reads of the server. Its
// verbs that write (a link's state, failback's checkpoints) go through
// the checkpoint store, which every writer of the target reads.

// ID names this writer (Options.ID).
func (s *Server) ID() string { return s.opts.ID }

// Target are the target cluster's client options (Options.Target).
func (s *Server) Target() []kgo.Opt { return s.opts.Target }

// IndexTopic is the offset index topic's name, "" when the writer has
// none (Options.Index).
func (s *Server) IndexTopic() string { return s.opts.Index.Name }

// Link is the writer's link named name, if it serves one.
func (s *Server) Link(name string) (Link, bool) {
	l, ok := s.links[name]
	return l, ok
}

// Store is the checkpoint store the server commits to: the checkpoint
// view and the links' control records.
func (s *Server) Store() *checkpoint.Store { return s.store }

// IndexGaps lists link's source topics the offset index cannot cover
// whole, by topic (coverage.go).
func (s *Server) IndexGaps(link string) []*ferryv1.LinkIndexGap { return s.gaps.of(link) }

// LoadIndex reads key's offset index with r: the index topic's records
// and the entries key's checkpoint carries that the topic does not hold
// yet (loadIndex).
func (s *Server) LoadIndex(ctx context.Context, r *offsetindex.Reader, key offsetindex.Key) (*offsetindex.Index, error) {
	return loadIndex(ctx, r, s.store, key)
}

// LoadIndexes is LoadIndex for several keys, reading the index topic
// once for all of them.
func (s *Server) LoadIndexes(ctx context.Context, r *offsetindex.Reader, keys []offsetindex.Key) (map[offsetindex.Key]*offsetindex.Index, error) {
	return loadIndexes(ctx, r, s.store, keys, nil)
}

// LoadIndexFor is LoadIndex for translating source offset s forward: the
// read starts at key's landmark below s when the records from there
// answer it as the whole index would (loadIndexFor).
func (s *Server) LoadIndexFor(ctx context.Context, r *offsetindex.Reader, key offsetindex.Key, offset int64) (*offsetindex.Index, error) {
	return s.loadIndexFor(ctx, r, key, offset)
}
