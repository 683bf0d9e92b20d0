// Package service is the shared skeleton of Ferry's mains: flags, layered
// configuration, logging, signals, and exiting once with a clear message.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/ferry-replicator/ferry/pkg/config"
	"github.com/ferry-replicator/ferry/pkg/telemetry"
)

// Config is a service's typed configuration.
type Config interface {
	// Validate fills derived defaults and reports every problem by key.
	Validate() error
	// Logging returns the log settings.
	Logging() telemetry.LogConfig
}

// Main parses args into cfg (which holds the defaults), builds the logger
// and runs run until it returns or a SIGINT/SIGTERM arrives, which cancels
// its context. It returns the process exit code: 0, 1 for a run failure,
// 2 for bad flags or configuration.
func Main[C Config](name, envPrefix, summary string, cfg C, args []string, env []string, stderr io.Writer,
	run func(ctx context.Context, cfg C, log *slog.Logger) error) int {
	// First, so a stop signal during start-up ends the process cleanly
	// (run sees ctx done) instead of killing it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP asks for a certificate reload (tlsconfig.ReloadOnHangup),
	// and its default action ends the process: one sent before run's
	// reloader is listening (a rotation as a pod starts) killed it at
	// start. Ignored until the reloader takes it; the reloader reads the
	// files anew when it starts listening.
	signal.Ignore(syscall.SIGHUP)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML configuration file")
	var sets multiFlag
	fs.Var(&sets, "set", "override one setting: --set key.path=value (repeatable)")
	printConfig := fs.Bool("print-config", false, "print the effective configuration and exit")
	printVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s: %s\n\nUsage: %s [--config FILE] [--set key=value]... [--print-config] [--version]\n\n", name, summary, name)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nSettings are layered: defaults, then the file, then environment variables\n"+
			"%s<KEY> (key path upper-cased, dots as underscores), then --set flags.\n"+
			"Every setting is described in docs/configuration.md. Keys:\n  %s\n",
			envPrefix, strings.Join(config.List(any(cfg)), "\n  "))
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", name, fs.Args())
		return 2
	}
	if *printVersion {
		fmt.Fprintln(stderr, Version(name))
		return 0
	}
	if err := config.Load(any(cfg), *path, env, envPrefix, sets); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if *printConfig {
		out, _ := yaml.Marshal(cfg)
		fmt.Fprintf(stderr, "%s", out)
		return 0
	}
	log, err := telemetry.NewLogger(cfg.Logging(), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	telemetry.BridgeSarama(log)
	if ctx.Err() != nil {
		log.Info(name + " stopped before it started")
		return 0
	}
	if err := run(ctx, cfg, log); err != nil {
		log.Error(name+" failed", "err", err)
		return 1
	}
	log.Info(name + " stopped")
	return 0
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
