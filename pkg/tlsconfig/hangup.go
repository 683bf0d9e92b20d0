package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnHangup re-reads the certificate material on every SIGHUP until
// ctx ends, the operator's way to force a rotation at once. After that a
// SIGHUP is ignored, not fatal: ctx ends when the service starts stopping,
// and a hangup sent with the stop (a rotation and a rollout at once, seen
// in CI as SIGHUP then SIGTERM) must not cut its drain short, which
// signal.Stop would, by giving SIGHUP its default action back.
func ReloadOnHangup(ctx context.Context, s *Source, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Ignore(syscall.SIGHUP)
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
