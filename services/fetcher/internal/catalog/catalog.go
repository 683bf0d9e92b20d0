// Package catalog finds healthy writers in the target region's Consul
// catalog and keeps the fetcher's writer list current with blocking queries,
// so writers that come, go or fail their health check are seen within
// seconds without polling.
package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ferry-replicator/ferry/pkg/consulclient"
)

// Config says where to look.
type Config struct {
	// Consul is how to reach an agent that sees the target region's
	// catalog: address (empty disables discovery), TLS, token file, and
	// the target region's datacenter (empty is the agent's).
	consulclient.Config `yaml:",inline"`
	// Service is the writers' service name.
	Service string `yaml:"service"`
}

// Watch calls update with the sorted addresses of the passing instances of
// the service whenever they change, until ctx ends. Errors are logged and
// retried; the last known list stays in force meanwhile.
func Watch(ctx context.Context, cfg Config, update func([]string), log *slog.Logger) error {
	// No request timeout: blocking queries wait up to WaitTime on the
	// agent, and ctx ends them.
	client, err := consulclient.New(cfg.Config, 0)
	if err != nil {
		return fmt.Errorf("writer discovery: %w", err)
	}
	// The client's pooled transport is this watch's own: its idle
	// connections, and their goroutines, end with it.
	defer client.Close()
	var index uint64
	var last []string
	for ctx.Err() == nil {
		entries, meta, err := client.Health().Service(cfg.Service, "", true,
			(&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("writer discovery", "service", cfg.Service, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			index = 0
			continue
		}
		// An index going backwards (Consul restarted) restarts the watch.
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
		var addrs []string
		for _, e := range entries {
			host := e.Service.Address
			if host == "" {
				host = e.Node.Address
			}
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(e.Service.Port)))
		}
		sort.Strings(addrs)
		if !slices.Equal(addrs, last) {
			log.Info("writers changed", "service", cfg.Service, "writers", addrs)
			update(addrs)
			last = addrs
		}
	}
	return nil
}
