// Command ferryctl is the operators' tool of Ferry's link control plane:
// it reads the state of the links the writers serve (status) and pauses,
// resumes or fails them over, through the writers' ControlService.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferry-replicator/ferry/services/ferryctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.RunContext(ctx, os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
