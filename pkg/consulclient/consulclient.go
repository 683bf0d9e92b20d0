// Package consulclient is how every Ferry process reaches Consul: one
// settings type, shared by the fetcher's leases and writer discovery and
// the writer's registration, and one function that builds a consul/api
// client from it.
//
// Consul's own environment variables (CONSUL_HTTP_SSL, CONSUL_CACERT,
// CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME,
// CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE) stay the defaults under the
// settings, as in every Consul client; a setting that is given wins. The
// address is always Ferry's own setting, since its emptiness turns Consul
// off. The ACL token is read from a file and never kept in
// the settings, so no log or status page that prints them can show it.
package consulclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// Config says how to reach a Consul agent. Services inline it into their
// Consul sections (lease, writers.consul, registration), so each section
// has the same keys.
type Config struct {
	// Address is the agent's HTTP API, host:port (a scheme:// prefix is
	// allowed, as consul/api allows it). Empty turns the section's Consul
	// use off.
	Address string `yaml:"address"`
	// Scheme is http or https. Empty: https when any TLS setting is given,
	// else consul/api's default (CONSUL_HTTP_SSL, or http).
	Scheme string `yaml:"scheme"`
	// Datacenter to address; empty is the agent's own.
	Datacenter string `yaml:"datacenter"`
	// CAFile is the PEM bundle the agent's certificate must chain to;
	// empty: CONSUL_CACERT, else the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this process's client certificate and key,
	// for an agent that verifies incoming connections.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the agent's certificate must carry, when it
	// is not the address's host (Consul's own certificates name
	// server.<datacenter>.<domain>).
	ServerName string `yaml:"server_name"`
	// TokenFile holds the ACL token (a mounted Secret); read when the
	// client is built, so a new token takes a restart.
	TokenFile string `yaml:"token_file"`
}

// usesTLS reports a TLS setting, which makes https the default scheme.
func (c Config) usesTLS() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Validate records every problem under the key prefix (lease,
// writers.consul, registration). Without an address there is nothing to
// check: the caller refuses the other keys as inert (see Settings).
func (c Config) Validate(prefix string, p *config.Problems) {
	if c.Address == "" {
		return
	}
	switch c.Scheme {
	case "", "http", "https":
	default:
		p.Addf(prefix+".scheme", "%q: want http or https", c.Scheme)
	}
	if c.Scheme == "http" && c.usesTLS() {
		p.Addf(prefix+".scheme", "http, but TLS settings (ca_file, cert_file, key_file, server_name) are given: they need https")
	}
	if c.CAFile != "" {
		if err := checkCA(c.CAFile); err != nil {
			p.Addf(prefix+".ca_file", "%v", err)
		}
	}
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		p.Addf(prefix+".cert_file", "cert_file and key_file go together: set both or neither")
	case c.CertFile != "":
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			p.Addf(prefix+".cert_file", "%s with %s: %v", c.CertFile, c.KeyFile, err)
		}
	}
	if c.TokenFile != "" {
		if err := checkToken(c.TokenFile); err != nil {
			p.Addf(prefix+".token_file", "%v", err)
		}
	}
}

// Settings lists the keys that mean nothing without an address, each with
// whether it is set, for the caller's config.Problems.RefuseInert.
func (c Config) Settings(prefix string) []config.Setting {
	return []config.Setting{
		{Key: prefix + ".scheme", Set: c.Scheme != ""},
		{Key: prefix + ".datacenter", Set: c.Datacenter != ""},
		{Key: prefix + ".ca_file", Set: c.CAFile != ""},
		{Key: prefix + ".cert_file", Set: c.CertFile != ""},
		{Key: prefix + ".key_file", Set: c.KeyFile != ""},
		{Key: prefix + ".server_name", Set: c.ServerName != ""},
		{Key: prefix + ".token_file", Set: c.TokenFile != ""},
	}
}

func checkCA(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("%s holds no PEM certificate", path)
	}
	return nil
}

// checkToken reads the token file without ever showing what it holds.
func checkToken(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == "" {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// Client is a consul/api client and the HTTP client under it, which is its
// own: Close ends its idle connections, and their goroutines.
type Client struct {
	*api.Client
	// HTTP is the client's transport holder; tests may wrap its Transport.
	HTTP *http.Client
}

// New builds a client for cfg. timeout bounds each request (0: none, for
// blocking queries that wait on the agent).
func New(cfg Config, timeout time.Duration) (*Client, error) {
	acfg := api.DefaultConfig() // reads CONSUL_*: the defaults under cfg
	acfg.Address = cfg.Address
	acfg.Datacenter = cfg.Datacenter
	switch {
	case cfg.Scheme != "":
		acfg.Scheme = cfg.Scheme
	case cfg.usesTLS():
		acfg.Scheme = "https"
	}
	setIf := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	setIf(&acfg.TLSConfig.CAFile, cfg.CAFile)
	setIf(&acfg.TLSConfig.CertFile, cfg.CertFile)
	setIf(&acfg.TLSConfig.KeyFile, cfg.KeyFile)
	setIf(&acfg.TLSConfig.Address, cfg.ServerName)
	setIf(&acfg.TokenFile, cfg.TokenFile)
	// HttpClient stays nil, so consul/api builds it with the TLS settings
	// applied to the transport (a client of our own would skip them).
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	acfg.HttpClient.Timeout = timeout // the same *http.Client the api.Client holds
	return &Client{Client: client, HTTP: acfg.HttpClient}, nil
}

// Close ends the client's idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }
