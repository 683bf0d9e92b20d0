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
)

// Config says where to look.
type Config struct {
	// Address is the Consul agent HTTP address; empty disables discovery.
	Address string `yaml:"address"`
	// Datacenter is the target region's datacenter; empty is the agent's.
	Datacenter string `yaml:"datacenter"`
	// Service is the writers' service name.
	Service string `yaml:"service"`
}

// Watch calls update with the sorted addresses of the passing instances of
// the service whenever they change, until ctx ends. Errors are logged and
// retried; the last known list stays in force meanwhile.
func Watch(ctx context.Context, cfg Config, update func([]string), log *slog.Logger) error {
	acfg := api.DefaultConfig()
	acfg.Address, acfg.Datacenter = cfg.Address, cfg.Datacenter
	client, err := api.NewClient(acfg)
	if err != nil {
		return fmt.Errorf("consul client: %w", err)
	}
	// The client's pooled transport is this watch's own: its idle
	// connections, and their goroutines, end with it.
	defer acfg.Transport.CloseIdleConnections()
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
