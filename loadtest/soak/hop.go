package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Shopify/toxiproxy/v2"
)

// hop is one proxied hop of the run. Its proxy is replaced, on the same
// address, when toxiproxy cannot remove a toxic: v2.5.0's RemoveToxic
// waits, holding the proxy's toxic lock, for every link to flush what the
// toxic held, and a link whose destination connection closed meanwhile
// never does (Shopify/toxiproxy#558, #427; a client giving up during a
// stall closes it). The hop then accepted no connection again and a CI
// soak hung for its whole 45 minutes (2026-12-03).
type hop struct {
	toxics *toxiproxy.ApiServer
	log    *slog.Logger

	mu sync.Mutex
	p  *toxiproxy.Proxy
}

// removeWait is how long a toxic's removal may take before the proxy is
// replaced: flushing what a latency toxic holds takes its latency at most.
const removeWait = 10 * time.Second

func (h *hop) proxy() *toxiproxy.Proxy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.p
}

// removeToxics removes the named toxics, or, when toxiproxy hangs doing
// it, replaces the proxy with one without toxics (every connection of
// the old one closed, as a reset link does).
func (h *hop) removeToxics(names ...string) error {
	p := h.proxy()
	done := make(chan error, 1)
	// Not stoppable: a hung removal stays blocked inside toxiproxy (the
	// soak's TestMain ignores it in its leak check).
	go func() {
		var errs []error
		for _, n := range names {
			errs = append(errs, p.Toxics.RemoveToxic(context.Background(), n))
		}
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(removeWait):
	}
	h.log.Warn("toxiproxy did not remove a toxic (Shopify/toxiproxy#558): replacing the proxy", "proxy", p.Name, "toxics", names)
	return h.replace(p)
}

// replace stops old and starts a proxy of the same name, address and
// upstream in its place.
func (h *hop) replace(old *toxiproxy.Proxy) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	old.Stop()
	p := toxiproxy.NewProxy(h.toxics, old.Name, old.Listen, old.Upstream)
	if err := p.Start(); err != nil {
		return fmt.Errorf("replace proxy %s: %w", old.Name, err)
	}
	h.p = p
	return nil
}

// reset removes every toxic and starts the proxy if it was stopped.
func (h *hop) reset() {
	p := h.proxy()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Toxics.ResetToxics(context.Background())
	}()
	select {
	case <-done:
		_ = p.Start() // an error means it is already listening
	case <-time.After(removeWait):
		h.log.Warn("toxiproxy did not reset its toxics (Shopify/toxiproxy#558): replacing the proxy", "proxy", p.Name)
		if err := h.replace(p); err != nil {
			h.log.Error("heal: replace proxy", "err", err)
		}
	}
}
