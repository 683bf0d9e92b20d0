package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
)

// The offset index keeps a partition's runs for offset_index.retention; a
// source topic that keeps its records longer can hold a consumer group
// positioned on a record the index no longer covers, which translates as
// before_index: at failover that group falls to the target's own commit or
// auto.offset.reset. Each Open names its topics' configs, so the writer
// compares the two at every open and names the topics it cannot cover (in
// status and ferryctl status, and once in the log), rather than letting a
// failover find out.

// kafkaDefaultRetention is Kafka's log.retention.hours default (168), the
// retention of a topic whose own retention.ms is not set: the source
// brokers' default cannot be read through the Open.
const kafkaDefaultRetention = 7 * 24 * time.Hour

// indexGap says why the index, kept for index, cannot cover what a topic
// of configs keeps; "" when it can.
func indexGap(configs map[string]string, index time.Duration) string {
	if policy := configs["cleanup.policy"]; strings.Contains(policy, "compact") && !strings.Contains(policy, "delete") {
		return fmt.Sprintf("compacted (cleanup.policy %s): the source keeps a key's latest record with no time limit, the offset index its runs for %v (offset_index.retention)", policy, index)
	}
	keeps, said := kafkaDefaultRetention, "the brokers' default retention (Kafka's is 168h; retention.ms is not set on the topic)"
	if v, ok := configs["retention.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			return ""
		case ms < 0:
			return fmt.Sprintf("retention.ms %s: the source keeps its records with no time limit, the offset index for %v (offset_index.retention)", v, index)
		}
		keeps, said = time.Duration(ms)*time.Millisecond, "retention.ms "+v
	}
	if keeps > index {
		return fmt.Sprintf("%s keeps records %v, longer than the offset index keeps them (offset_index.retention %v): a group further behind cannot be translated", said, keeps, index)
	}
	return ""
}

// indexGaps are the topics each link's opens named that the index cannot
// cover, by link and topic (bounded by the topics the links copy).
type indexGaps struct {
	mu   sync.Mutex
	gaps map[string]map[string]string
}

// note records what an open said of a link's topics, and reports the
// topics whose gap is new (to log once).
func (g *indexGaps) note(link string, topics []*ferryv1.TopicSpec, index time.Duration) (fresh []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gaps == nil {
		g.gaps = map[string]map[string]string{}
	}
	if g.gaps[link] == nil {
		g.gaps[link] = map[string]string{}
	}
	for _, t := range topics {
		reason := indexGap(t.GetConfigs(), index)
		prev, had := g.gaps[link][t.GetName()]
		switch {
		case reason == "":
			delete(g.gaps[link], t.GetName())
		case !had || prev != reason:
			g.gaps[link][t.GetName()] = reason
			fresh = append(fresh, t.GetName())
		}
	}
	return fresh
}

// reason is why link's topic is not covered ("" when it is).
func (g *indexGaps) reason(link, topic string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gaps[link][topic]
}

// of lists link's gaps, by topic.
func (g *indexGaps) of(link string) []*ferryv1.LinkIndexGap {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*ferryv1.LinkIndexGap
	for topic, reason := range g.gaps[link] {
		out = append(out, &ferryv1.LinkIndexGap{Topic: topic, Reason: reason})
	}
	slices.SortFunc(out, func(a, b *ferryv1.LinkIndexGap) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}
