package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// addToxic adds the toxic spec describes (toxiproxy's JSON form). Adding
// interrupts the link's last toxic and can hang as a removal does: the
// proxy is then replaced and the toxic added to the new one.
func (h *hop) addToxic(spec string) error {
	add := func(p *toxiproxy.Proxy) error {
		_, err := p.Toxics.AddToxicJson(strings.NewReader(spec))
		return err
	}
	p := h.proxy()
	err, ok := within(func() error { return add(p) })
	if ok {
		return err
	}
	h.log.Warn("toxiproxy did not add a toxic (Shopify/toxiproxy#558): replacing the proxy", "proxy", p.Name)
	if err := h.replace(p); err != nil {
		return err
	}
	return add(h.proxy())
}

// removeToxics removes the named toxics, or, when toxiproxy hangs doing
// it, replaces the proxy with one without toxics (every connection of
// the old one closed, as a reset link does).
func (h *hop) removeToxics(names ...string) error {
	p := h.proxy()
	err, ok := within(func() error {
		var errs []error
		for _, n := range names {
			errs = append(errs, p.Toxics.RemoveToxic(context.Background(), n))
		}
		return errors.Join(errs...)
	})
	if ok {
		return err
	}
	h.log.Warn("toxiproxy did not remove a toxic (Shopify/toxiproxy#558): replacing the proxy", "proxy", p.Name, "toxics", names)
	return h.replace(p)
}

// within runs a toxiproxy change and reports whether it returned within
// removeWait. Not stoppable: a hung change stays blocked inside toxiproxy
// (the soak's TestMain ignores it in its leak check).
func within(change func() error) (err error, ok bool) {
	done := make(chan error, 1)
	go func() { done <- change() }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(removeWait):
		return nil, false
	}
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
	if _, ok := within(func() error { p.Toxics.ResetToxics(context.Background()); return nil }); ok {
		_ = p.Start() // an error means it is already listening
		return
	}
	h.log.Warn("toxiproxy did not reset its toxics (Shopify/toxiproxy#558): replacing the proxy", "proxy", p.Name)
	if err := h.replace(p); err != nil {
		h.log.Error("heal: replace proxy", "err", err)
	}
}
