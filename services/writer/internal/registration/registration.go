// Package registration puts the writer in the target region's Consul
// catalog, with a health check on its readiness endpoint, so fetchers find
// it; it takes it out again at the start of a drain.
package registration

import (
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/consul/api"
)

// Config says how to register.
type Config struct {
	// Address is the Consul agent HTTP address; empty disables registration.
	Address string `yaml:"address"`
	// Datacenter is the target region's datacenter; empty is the agent's.
	Datacenter string `yaml:"datacenter"`
	// Service is the service name fetchers look for.
	Service string `yaml:"service"`
	// Advertise is the gRPC host:port fetchers should dial; default listen.
	Advertise string `yaml:"advertise"`
}

// Registration is a writer's entry in the catalog.
type Registration struct {
	agent *api.Agent
	id    string
}

// Register adds the writer. The check polls the admin /readyz endpoint
// (plain HTTP, so it works whatever the gRPC port's TLS demands); Consul
// drops an instance whose check stays critical for a minute.
func Register(cfg Config, id, grpcAddr, adminAddr string) (*Registration, error) {
	acfg := api.DefaultConfig()
	acfg.Address, acfg.Datacenter = cfg.Address, cfg.Datacenter
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	adv := cfg.Advertise
	if adv == "" {
		adv = grpcAddr
	}
	host, portText, err := net.SplitHostPort(adv)
	if err != nil {
		return nil, fmt.Errorf("advertise address %q: %w", adv, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("advertise port %q: %w", portText, err)
	}
	err = client.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: cfg.Service + "-" + id, Name: cfg.Service, Address: host, Port: port,
		Check: &api.AgentServiceCheck{
			HTTP:                           "http://" + adminAddr + "/readyz",
			Interval:                       "1s",
			Timeout:                        "1s",
			DeregisterCriticalServiceAfter: "1m",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("register %s in consul: %w", cfg.Service, err)
	}
	return &Registration{agent: client.Agent(), id: cfg.Service + "-" + id}, nil
}

// Deregister removes the writer, so fetchers stop choosing it.
func (r *Registration) Deregister() error {
	if err := r.agent.ServiceDeregister(r.id); err != nil {
		return fmt.Errorf("deregister %s: %w", r.id, err)
	}
	return nil
}
