package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profiler takes CPU profiles of a run's Ferry processes from their
// profiling ports (admin.pprof_listen: /debug/pprof/profile), one file per
// process:
// <dir>/<name>-<process>.pprof, and then a heap profile of each
// (/debug/pprof/heap, what is in use at that moment): <name>-<process>.heap.pprof.
type profiler struct {
	dir, name string
	seconds   int
	out       io.Writer
	wg        sync.WaitGroup
}

// start asks each profiling address for a profile of p.seconds; addrs
// maps a process name to its admin.pprof_listen address.
func (p *profiler) start(ctx context.Context, addrs map[string]string) {
	for proc, addr := range addrs {
		p.wg.Go(func() {
			path := filepath.Join(p.dir, fmt.Sprintf("%s-%s.pprof", p.name, proc))
			if err := p.take(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, p.seconds), path); err != nil {
				fmt.Fprintf(p.out, "    profile %s: %v\n", proc, err)
				return
			}
			path = filepath.Join(p.dir, fmt.Sprintf("%s-%s.heap.pprof", p.name, proc))
			if err := p.take(ctx, fmt.Sprintf("http://%s/debug/pprof/heap", addr), path); err != nil {
				fmt.Fprintf(p.out, "    heap profile %s: %v\n", proc, err)
			}
		})
	}
}

func (p *profiler) take(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.seconds)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// wait returns once every profile asked for has been written or failed.
func (p *profiler) wait() { p.wg.Wait() }
