// Command ferry-produce writes Ferry's workload to a Kafka topic: unique,
// sequenced, compressible records with keys and headers, at a fixed rate or
// as fast as possible, optionally in transactions with some aborted (they
// must never reach a target). It shows progress while it runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/workload"
)

func main() {
	brokers := flag.String("brokers", "", "bootstrap servers, comma-separated")
	var o workload.Options
	flag.StringVar(&o.Topic, "topic", "ferry.load", "topic")
	partitions := flag.Int("partitions", 8, "partitions (records spread evenly)")
	create := flag.Bool("create", false, "create the topic (lz4) first")
	flag.IntVar(&o.Records, "records", 100000, "records to produce")
	flag.IntVar(&o.ValueBytes, "size", 1024, "approximate value size in bytes")
	flag.IntVar(&o.Rate, "rate", 0, "records per second; 0 is as fast as possible")
	flag.BoolVar(&o.Transactional, "transactional", false, "produce in transactions")
	flag.IntVar(&o.TxnRecords, "txn-records", 100, "records per transaction")
	flag.IntVar(&o.AbortEvery, "abort-every", 0, "abort every n-th transaction (0: none)")
	seed := flag.Uint64("seed", 1, "seed of the values")
	flag.Parse()
	o.Partitions, o.Seed = int32(*partitions), *seed
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "ferry-produce: --brokers is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, strings.Split(*brokers, ","), o, *create); err != nil {
		fmt.Fprintln(os.Stderr, "\nferry-produce:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addrs []string, o workload.Options, create bool) error {
	if create {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			return err
		}
		lz4 := "lz4"
		_, err = kadm.NewClient(cl).CreateTopic(ctx, o.Partitions, -1, map[string]*string{"compression.type": &lz4}, o.Topic)
		cl.Close()
		if err != nil {
			return fmt.Errorf("create %s: %w", o.Topic, err)
		}
	}
	p, err := workload.NewProducer(addrs, o)
	if err != nil {
		return err
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	bar := func() {
		n := p.Produced() + p.Aborted()
		pct := float64(n) / float64(o.Records)
		filled := int(pct * 30)
		fmt.Printf("\r[%-30s] %5.1f%%  %d/%d  %.0f rec/s  aborted %d   ",
			strings.Repeat("=", filled), pct*100, n, o.Records, float64(n)/time.Since(start).Seconds(), p.Aborted())
	}
	for {
		select {
		case err := <-done:
			bar()
			fmt.Println()
			if err == nil {
				fmt.Printf("produced %d committed records (%d aborted) in %v\n", p.Produced(), p.Aborted(), time.Since(start).Round(time.Millisecond))
			}
			return err
		case <-tick.C:
			bar()
		}
	}
}
