// Command ferry-verify compares a replicated target with its source,
// partition by partition, record by record (read_committed on both), and
// reports lost, duplicated, reordered and corrupt records and aborted
// records that leaked. It exits 1 when the copy is not exact.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferry-replicator/ferry/loadtest/verify"
)

func main() {
	source := flag.String("source", "", "source bootstrap servers, comma-separated")
	target := flag.String("target", "", "target bootstrap servers, comma-separated")
	topics := flag.String("topics", "", "source topics, comma-separated; each may be source=target")
	prefix := flag.String("prefix", "", "target name prefix for topics given without =target (MM2 style: source.)")
	jsonOut := flag.String("json", "", "also write the result as JSON to this file")
	flag.Parse()
	if *source == "" || *target == "" || *topics == "" {
		fmt.Fprintln(os.Stderr, "ferry-verify: --source, --target and --topics are required")
		os.Exit(2)
	}
	var pairs []verify.Pair
	for _, t := range strings.Split(*topics, ",") {
		src, dst, ok := strings.Cut(t, "=")
		if !ok {
			dst = *prefix + src
		}
		pairs = append(pairs, verify.Pair{Source: src, Target: dst})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := verify.Compare(ctx, strings.Split(*source, ","), strings.Split(*target, ","), pairs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-verify:", err)
		os.Exit(1)
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "ferry-verify:", err)
			os.Exit(1)
		}
	}
	fmt.Println(res.Line())
	fmt.Println(res.LatencyLine())
	if !res.OK() {
		os.Exit(1)
	}
}
