package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pkgconfig "github.com/ferry-replicator/ferry/pkg/config"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Settings are where ferryctl finds the writers and its certificate: a
// YAML file (--config, FERRY_CTL_CONFIG), under FERRY_CTL_* environment
// variables (FERRY_CTL_WRITERS=a:7400,b:7400), under the flags.
type Settings struct {
	// Writers are the writers' gRPC addresses (host:port).
	Writers []string `yaml:"writers"`
	// WriterIDs are the identities a writer's certificate may present
	// (SPIFFE IDs or DNS names), as a fetcher's writers.tls.allowed_ids.
	WriterIDs []string `yaml:"writer_ids"`
	// CertFile and KeyFile are the operator's certificate, whose identity
	// the writers' control.allowed_ids must name; CAFile the bundle the
	// writers' chains end in.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
	// Timeout bounds each call (default 10s), and a planned failover's
	// whole wait (default 5m there).
	Timeout time.Duration `yaml:"timeout"`
}

// defaultTimeout bounds each call when no timeout is configured.
const defaultTimeout = 10 * time.Second

// conn holds the flags every verb takes.
type conn struct {
	config        string
	writers, ids  multi
	cert, key, ca string
	output        string
	timeout       time.Duration
	// timeoutSet is true when a timeout was configured (flag, file or
	// environment) rather than defaulted.
	timeoutSet bool
}

// multi is a repeatable flag; each value may also be comma-separated.
type multi []string

func (m *multi) String() string { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*m = append(*m, s)
		}
	}
	return nil
}

func (c *conn) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "a YAML file of writers, writer_ids, cert_file, key_file, ca_file, timeout (or FERRY_CTL_CONFIG)")
	fs.Var(&c.writers, "writer", "a writer's gRPC host:port; repeat for each writer of the target (or FERRY_CTL_WRITERS)")
	fs.Var(&c.ids, "writer-id", "an identity a writer's certificate may present (SPIFFE ID or DNS name); repeatable (or FERRY_CTL_WRITER_IDS)")
	fs.StringVar(&c.cert, "cert", "", "the operator's certificate (PEM), named in the writers' control.allowed_ids (or FERRY_CTL_CERT_FILE)")
	fs.StringVar(&c.key, "key", "", "its private key (PEM) (or FERRY_CTL_KEY_FILE)")
	fs.StringVar(&c.ca, "ca", "", "the CA bundle the writers' certificates chain to (or FERRY_CTL_CA_FILE)")
	fs.StringVar(&c.output, "o", "text", "output: text or json")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound on each call (default 10s), and on the whole wait of failover --planned (default 5m) (or FERRY_CTL_TIMEOUT)")
}

// settings layers the file, the environment and the flags.
func (c *conn) settings(env []string) (Settings, error) {
	var s Settings
	path := c.config
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "FERRY_CTL_CONFIG="); ok && path == "" {
			path = v
		}
	}
	var rest []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FERRY_CTL_CONFIG=") {
			rest = append(rest, kv)
		}
	}
	if err := pkgconfig.Load(&s, path, rest, "FERRY_CTL_", nil); err != nil {
		return Settings{}, err
	}
	if len(c.writers) > 0 {
		s.Writers = c.writers
	}
	if len(c.ids) > 0 {
		s.WriterIDs = c.ids
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{{&s.CertFile, c.cert}, {&s.KeyFile, c.key}, {&s.CAFile, c.ca}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if c.timeout > 0 {
		s.Timeout = c.timeout
	}
	if s.Timeout == 0 {
		s.Timeout = defaultTimeout
	} else {
		c.timeoutSet = true
	}
	return s, s.validate(c.output)
}

func (s Settings) validate(output string) error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"--cert", s.CertFile}, {"--key", s.KeyFile}, {"--ca", s.CAFile}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(s.Writers) == 0 {
		missing = append(missing, "--writer")
	}
	if len(s.WriterIDs) == 0 {
		missing = append(missing, "--writer-id")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s required (flags, FERRY_CTL_* or --config)", strings.Join(missing, ", "))
	}
	for _, id := range s.WriterIDs {
		if err := tlsconfig.CheckID(id); err != nil {
			return fmt.Errorf("--writer-id %q: %v", id, err)
		}
	}
	if output != "text" && output != "json" {
		return fmt.Errorf("-o %q: want text or json", output)
	}
	if s.Timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// client is a connection to each writer named.
type client struct {
	writers []writer
	timeout time.Duration
	// timeoutSet: the operator chose timeout (conn.timeoutSet).
	timeoutSet bool
	json       bool
}

type writer struct {
	addr string
	conn *grpc.ClientConn
	ctl  ferryv1.ControlServiceClient
}

// dial connects (lazily, as gRPC does) to every writer named.
func (c *conn) dial(env []string) (*client, error) {
	s, err := c.settings(env)
	if err != nil {
		return nil, err
	}
	src, err := tlsconfig.NewSource(tlsconfig.Config{
		CertFile: s.CertFile, KeyFile: s.KeyFile, CAFile: s.CAFile, AllowedIDs: s.WriterIDs,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	creds := credentials.NewTLS(src.ClientTLS())
	cl := &client{timeout: s.Timeout, timeoutSet: c.timeoutSet, json: c.output == "json"}
	for _, addr := range s.Writers {
		gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			cl.close()
			return nil, fmt.Errorf("writer %s: %w", addr, err)
		}
		cl.writers = append(cl.writers, writer{addr: addr, conn: gc, ctl: ferryv1.NewControlServiceClient(gc)})
	}
	return cl, nil
}

// others is c for other writers (and, when given, their identities),
// with the same certificate.
func (c conn) others(writers, ids multi) conn {
	c.writers = writers
	if len(ids) > 0 {
		c.ids = ids
	}
	return c
}

func (c *client) close() {
	for _, w := range c.writers {
		w.conn.Close()
	}
}

// call runs f against w within the call timeout.
func (c *client) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return f(ctx)
}
