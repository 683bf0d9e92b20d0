// Package telemetry sets up a service's logging. Loggers are built once in
// main and passed down; nothing in Ferry logs through a global.
package telemetry

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/IBM/sarama"

	"github.com/ferry-replicator/ferry/pkg/config"
)

// LogConfig selects the log level and format.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// Validate records problems under the key log.
func (c LogConfig) Validate(p *config.Problems) {
	if _, err := parseLevel(c.Level); err != nil {
		p.Addf("log.level", "%v", err)
	}
	if c.Format != "text" && c.Format != "json" {
		p.Addf("log.format", "%q: want text or json", c.Format)
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger builds the service's logger, writing to w.
func NewLogger(c LogConfig, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// BridgeSarama sends sarama's package logger to l at debug level: sarama
// logs every connection and rebalance, which is noise unless debugging.
// Call it once, from main, before any sarama client exists.
func BridgeSarama(l *slog.Logger) {
	sarama.Logger = log.New(slogWriter{l.With("component", "sarama")}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}
