// Package admin serves a service's operational HTTP endpoints on its admin
// port: /metrics (Prometheus), /healthz (the process runs), /readyz (it can
// do its work), /status (a JSON view of what it is doing) and / (the same
// view as a page for people, page.go); and, only
// when asked for, /debug/pprof on a loopback port of its own.
//
// Why pprof has its own port: the admin port is reached by the cluster
// (Prometheus scrapes, health checks), and a profile is not for everyone
// who can scrape: it shows the code and memory of a process holding Kafka
// credentials, and a 30 s CPU profile or a full goroutine dump costs the
// process real work on request, without authentication.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig"
)

// Config is a service's `admin` settings.
type Config struct {
	// Listen is the address of /metrics, /healthz, /readyz and /status.
	Listen string `yaml:"listen"`
	// PprofListen is the address of /debug/pprof; empty (the default)
	// serves none. It must be a loopback address: reach it with
	// `kubectl port-forward` or from the host.
	PprofListen string `yaml:"pprof_listen"`
}

// Validate records each problem under the key admin.
func (c Config) Validate(p *config.Problems) {
	if c.Listen == "" {
		p.Addf("admin.listen", "required")
	}
	if c.PprofListen != "" && !tlsconfig.IsLoopback(c.PprofListen) {
		p.Addf("admin.pprof_listen", "%q: profiles are served on a loopback address only (127.0.0.1:<port>), reached with kubectl port-forward or from the host", c.PprofListen)
	}
}

// Server is the admin HTTP server, and the profiling one when configured.
type Server struct {
	http  *http.Server
	ln    net.Listener
	pprof *http.Server // nil: profiling off
	pln   net.Listener
	log   *slog.Logger
}

// Options wires the endpoints to the service.
type Options struct {
	// Ready reports why the service cannot serve yet; nil means ready.
	Ready func() error
	// Status returns a JSON-encodable view for /status; nil serves none.
	Status func() any
	// Page is the body of the status page at GET /: an html/template
	// defining "body", executed on what Status returns (page.go). Empty,
	// or without Status, serves no page.
	Page string
	// Title heads the status page.
	Title string
	// Traces links the status page into a Jaeger UI; zero links to none.
	Traces TraceLinks
}

// Listen binds cfg's addresses (host:port; port 0 picks one) and prepares
// the routes.
func Listen(cfg Config, reg *prometheus.Registry, opts Options, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Listen, err)
	}
	ready := func() error {
		if opts.Ready == nil {
			return nil
		}
		return opts.Ready()
	}
	// The same answer as /readyz, at each scrape: an alert sees a process
	// that runs but cannot work (deploy/observability) without probing it.
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_ready", Help: "1 when the service can do its work (its /readyz answers 200), else 0.",
	}, func() float64 {
		if ready() != nil {
			return 0
		}
		return 1
	})); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if opts.Status != nil {
		mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(opts.Status())
		})
	}
	if opts.Status != nil && opts.Page != "" {
		page, err := parsePage(opts.Page)
		if err == nil {
			err = opts.Traces.parse()
		}
		if err != nil {
			ln.Close()
			return nil, err
		}
		mux.HandleFunc("GET /{$}", servePage(page, opts.Title, opts.Status, opts.Traces))
	}
	s := &Server{
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		log:  log,
	}
	if cfg.PprofListen != "" {
		if s.pln, err = net.Listen("tcp", cfg.PprofListen); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin pprof listen %s: %w", cfg.PprofListen, err)
		}
		pmux := http.NewServeMux()
		pmux.HandleFunc("/debug/pprof/", pprof.Index)
		pmux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		pmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pmux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		s.pprof = &http.Server{Handler: pmux, ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// Addr is the bound admin address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// PprofAddr is the bound profiling address, "" when profiling is off.
func (s *Server) PprofAddr() string {
	if s.pln == nil {
		return ""
	}
	return s.pln.Addr().String()
}

// Run serves until ctx ends, then shuts down within a few seconds.
func (s *Server) Run(ctx context.Context) error {
	servers := []*http.Server{s.http}
	errc := make(chan error, 2)
	go func() { errc <- s.http.Serve(s.ln) }()
	s.log.Info("admin server listening", "addr", s.Addr())
	if s.pprof != nil {
		servers = append(servers, s.pprof)
		go func() { errc <- s.pprof.Serve(s.pln) }()
		s.log.Info("profiling server listening (admin.pprof_listen)", "addr", s.PprofAddr())
	}
	var failed error
	select {
	case err := <-errc:
		failed = fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutCtx); err != nil {
			// A request still running (a 30 s CPU profile, a slow
			// scrape) must not turn a clean stop into a failed one:
			// cut it off.
			s.log.Warn("admin requests still running at shutdown; closing them", "err", err)
			_ = srv.Close()
		}
	}
	// Every Serve returns once its server is shut down; one that failed
	// has returned already.
	left := len(servers)
	if failed != nil {
		left--
	}
	for range left {
		if err := <-errc; failed == nil && !errors.Is(err, http.ErrServerClosed) {
			failed = fmt.Errorf("admin server: %w", err)
		}
	}
	return failed
}
