package harness

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// scrape reads a Prometheus text endpoint into sums per metric name (labels
// folded) and values per full series.
func scrape(ctx context.Context, adminAddr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", adminAddr, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] = v
		if j := strings.IndexByte(series, '{'); j >= 0 {
			out[series[:j]] += v
		}
	}
	return out, sc.Err()
}

// WaitReady polls http://adminAddr/readyz until it answers 200 or ctx ends.
func WaitReady(ctx context.Context, adminAddr string) error { return waitOK(ctx, adminAddr, "/readyz") }

// WaitHealthy polls http://adminAddr/healthz until it answers 200 (the
// process runs and serves) or ctx ends.
func WaitHealthy(ctx context.Context, adminAddr string) error {
	return waitOK(ctx, adminAddr, "/healthz")
}

func waitOK(ctx context.Context, adminAddr, path string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+path, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s%s: %w", adminAddr, path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
