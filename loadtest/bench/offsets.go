package bench

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// endOffsets reads the sum of a topic's end offsets (0 while the topic does
// not exist). With transactions the sum also counts commit markers.
type endOffsets struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
}

func newEndOffsets(addr, topic string) (*endOffsets, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, fmt.Errorf("end offsets client: %w", err)
	}
	return &endOffsets{cl: cl, adm: kadm.NewClient(cl), topic: topic}, nil
}

func (e *endOffsets) sum(ctx context.Context) int64 {
	offs, err := e.adm.ListEndOffsets(ctx, e.topic)
	if err != nil {
		return 0
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

func (e *endOffsets) close() { e.cl.Close() }
