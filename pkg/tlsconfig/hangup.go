package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnHangup re-reads the certificate material on every SIGHUP until
// ctx ends, the operator's way to force a rotation at once.
func ReloadOnHangup(ctx context.Context, s *Source, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := s.Reload(); err == nil {
				log.Info("SIGHUP: certificates reloaded")
			}
		}
	}
}
