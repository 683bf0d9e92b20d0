// Package registration keeps the writer in the target region's Consul
// catalog, with a health check on its readiness endpoint, so fetchers find
// it; it takes it out again at the start of a drain.
package registration

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ferry-replicator/ferry/pkg/consulclient"
)

// Config says how to register.
type Config struct {
	// Consul is how to reach the agent: address (empty disables
	// registration), TLS, token file, and the target region's datacenter
	// (empty is the agent's).
	consulclient.Config `yaml:",inline"`
	// Service is the service name fetchers look for.
	Service string `yaml:"service"`
	// Advertise is the gRPC host:port fetchers should dial; default listen.
	Advertise string `yaml:"advertise"`
}

// Retry and refresh pacing. The agent is local to the writer, so a second
// is a long time for it; a minute-long Consul outage costs at most one
// maxRetry of extra absence after it ends.
const (
	minRetry       = 500 * time.Millisecond
	maxRetry       = 10 * time.Second
	refresh        = 10 * time.Second
	requestTimeout = 5 * time.Second
)

// Registration is a writer's entry in the catalog.
type Registration struct {
	client  *consulclient.Client
	agent   *api.Agent
	service *api.AgentServiceRegistration
	log     *slog.Logger

	// pacing, shortened by tests
	minRetry, maxRetry, refresh, timeout time.Duration
}

// New checks the settings and prepares the entry; it does not reach Consul,
// so a Consul agent that is down when the writer starts does not stop it:
// Run registers when it can. The check polls the admin /readyz endpoint
// (plain HTTP, so it works whatever the gRPC port's TLS demands); Consul
// drops an instance whose check stays critical for a minute.
func New(cfg Config, id, grpcAddr, adminAddr string, log *slog.Logger) (*Registration, error) {
	// Requests are bounded by their contexts (timeout), not the client.
	client, err := consulclient.New(cfg.Config, 0)
	if err != nil {
		return nil, fmt.Errorf("registration: %w", err)
	}
	adv := cfg.Advertise
	if adv == "" {
		adv = grpcAddr
	}
	host, portText, err := net.SplitHostPort(adv)
	if err != nil {
		return nil, fmt.Errorf("registration.advertise %q: %w", adv, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("registration.advertise port %q: %w", portText, err)
	}
	return &Registration{
		client: client,
		agent:  client.Agent(),
		service: &api.AgentServiceRegistration{
			ID: cfg.Service + "-" + id, Name: cfg.Service, Address: host, Port: port,
			Check: &api.AgentServiceCheck{
				HTTP:                           "http://" + adminAddr + "/readyz",
				Interval:                       "1s",
				Timeout:                        "1s",
				DeregisterCriticalServiceAfter: "1m",
			},
		},
		log:      log,
		minRetry: minRetry, maxRetry: maxRetry, refresh: refresh, timeout: requestTimeout,
	}, nil
}

// ID is the writer's service ID in the catalog.
func (r *Registration) ID() string { return r.service.ID }

// Run keeps the entry in the catalog until ctx ends, then removes it and
// returns. It registers with a doubling backoff while the agent cannot be
// reached, and then checks every refresh that the entry is still there,
// adding it again if not (an agent restarted without its state, or the
// entry dropped after its check stayed critical), so the writer never
// serves unseen for longer than a refresh once Consul answers.
func (r *Registration) Run(ctx context.Context) {
	wait := r.minRetry
	for {
		present, err := r.ensure(ctx)
		switch {
		case err == nil && !present: // even if ctx ended meanwhile: it is in
			r.log.Info("registered in consul", "service", r.service.Name, "id", r.service.ID)
		case err != nil && ctx.Err() == nil:
			r.log.Warn("consul registration failed; retrying", "service", r.service.ID, "retry_in", wait, "err", err)
		}
		next := r.refresh
		if err != nil {
			next, wait = wait, min(2*wait, r.maxRetry)
		} else {
			wait = r.minRetry
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			if err := r.deregister(); err != nil {
				r.log.Warn("leave consul catalog", "service", r.service.ID, "err", err)
			}
			r.client.Close()
			return
		case <-t.C:
		}
	}
}

// ensure adds the entry unless the agent already has it, and says whether it
// was there.
func (r *Registration) ensure(ctx context.Context) (present bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	if s, _, err := r.agent.Service(r.service.ID, q); err == nil && s != nil {
		return true, nil
	}
	// Service errors both when the agent is unreachable and when it does not
	// know the ID (404); registering tells the two apart, and is idempotent.
	if err := r.agent.ServiceRegisterOpts(r.service, api.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		return false, fmt.Errorf("register %s in consul: %w", r.service.Name, err)
	}
	return false, nil
}

// deregister removes the entry, so fetchers stop choosing this writer. It is
// bounded: a hung agent must not hold up the drain.
func (r *Registration) deregister() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if err := r.agent.ServiceDeregisterOpts(r.service.ID, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deregister %s: %w", r.service.ID, err)
	}
	return nil
}
