package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnHangup re-reads the certificate material on every SIGHUP until
// ctx ends, the operator's way to force a rotation at once, and once as it
// starts if the files changed since they were loaded. After that a
// SIGHUP is ignored, not fatal: ctx ends when the service starts stopping,
// and a hangup sent with the stop (a rotation and a rollout at once, seen
// in CI as SIGHUP then SIGTERM) must not cut its drain short, which
// signal.Stop would, by giving SIGHUP its default action back.
func ReloadOnHangup(ctx context.Context, s *Source, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Ignore(syscall.SIGHUP)
	// A hangup sent before this listened was ignored (service.Main): the
	// files are read again now if they changed since the start read them.
	s.poll()
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
