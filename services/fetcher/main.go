// Command ferry-fetcher reads source Kafka partitions and streams them as
// compressed batches to Ferry writers in the target region.
package main

import (
	"os"

	"github.com/ferry-replicator/ferry/pkg/service"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/app"
	"github.com/ferry-replicator/ferry/services/fetcher/internal/config"
)

func main() {
	cfg := config.Defaults()
	os.Exit(service.Main("ferry-fetcher", "FERRY_FETCHER_",
		"replicate source Kafka partitions to Ferry writers",
		&cfg, os.Args[1:], os.Environ(), os.Stderr, app.Run))
}
