// Command gen writes Ferry's Grafana dashboard (package observability) to
// the file named by its argument: `make dashboard` regenerates
// deploy/observability/ferry-dashboard.json with it.
package main

import (
	"fmt"
	"os"

	"github.com/ferry-replicator/ferry/deploy/observability"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: gen FILE")
	}
	b, err := observability.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(args[0], b, 0o644)
}
