// Command ferry-writer receives record batches from Ferry fetchers over gRPC
// and produces them to the target Kafka cluster with their checkpoints.
// `ferry-writer checkpoint forget` forgets one partition's checkpoint.
package main

import (
	"os"

	"github.com/ferry-replicator/ferry/pkg/service"
	"github.com/ferry-replicator/ferry/services/writer/internal/app"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "checkpoint" {
		os.Exit(app.CheckpointCommand(os.Args[2:], os.Environ(), os.Stderr))
	}
	cfg := config.Defaults()
	os.Exit(service.Main("ferry-writer", "FERRY_WRITER_",
		"produce replicated batches to the target Kafka cluster",
		&cfg, os.Args[1:], os.Environ(), os.Stderr, app.Run))
}
