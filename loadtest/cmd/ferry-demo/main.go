// Command ferry-demo shows Ferry end to end on one machine with nothing
// installed: two in-process Kafka clusters (kfake) as source and target, a
// ferry-writer and a ferry-fetcher as child processes, a workload produced
// while replication runs, live progress, and a verification of the target
// against the source. It exits 0 only when the copy is perfect.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/jaegeragent"
	"github.com/ferry-replicator/ferry/loadtest/verify"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/tracing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	records := flag.Int("records", 1_000_000, "records to produce")
	size := flag.Int("size", 1024, "approximate value size in bytes")
	partitions := flag.Int("partitions", 8, "partitions of the demo topic")
	bin := flag.String("bin", "bin", "folder holding ferry-fetcher and ferry-writer")
	follow := flag.Bool("follow", false, "keep running after verification, for a look at /metrics")
	withJaeger := flag.Bool("jaeger", false, "start a local Jaeger, trace the services, and print the trace of a sampled record")
	sampling := flag.Float64("sampling", 0.01, "with --jaeger: the services' tracing.sampling_ratio")
	flag.Parse()

	dir, err := os.MkdirTemp("", "ferry-demo-")
	if err != nil {
		return err
	}
	fmt.Printf("ferry-demo: work folder %s (configs and logs)\n", dir)

	source, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return fmt.Errorf("source cluster: %w", err)
	}
	defer source.Close()
	target, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return fmt.Errorf("target cluster: %w", err)
	}
	defer target.Close()
	const topic = "demo.orders"
	srcAdmin, err := kgo.NewClient(kgo.SeedBrokers(source.ListenAddrs()...))
	if err != nil {
		return err
	}
	defer srcAdmin.Close()
	if _, err := kadm.NewClient(srcAdmin).CreateTopic(ctx, int32(*partitions), 1, map[string]*string{"compression.type": ptr("lz4")}, topic); err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}

	addrs := map[string]string{}
	for _, name := range []string{"writer", "writer-admin", "fetcher-admin"} {
		if addrs[name], err = harness.FreeAddr(); err != nil {
			return err
		}
	}
	link := map[string]any{"name": "demo", "naming": "prefix", "prefix": "source."}
	wcfg := harness.WriterConfig("writer-1", addrs["writer"], addrs["writer-admin"], target.ListenAddrs(), link)
	fcfg := harness.FetcherConfig("fetcher-1", addrs["fetcher-admin"], "demo", source.ListenAddrs(), []string{addrs["writer"]}, `demo\..*`)
	var jaeger *jaegeragent.Agent
	if *withJaeger {
		fmt.Println("ferry-demo: starting Jaeger (the first run builds it, which takes minutes)")
		if jaeger, err = jaegeragent.Start(ctx, jaegeragent.Options{}); err != nil {
			return fmt.Errorf("jaeger: %w", err)
		}
		defer jaeger.Stop()
		tc := map[string]any{"endpoint": jaeger.OTLPGRPCAddr(), "insecure": true, "sampling_ratio": *sampling}
		wcfg["tracing"], fcfg["tracing"] = tc, tc
	}
	writer, err := harness.Start(dir, filepath.Join(*bin, "ferry-writer"), "writer", wcfg)
	if err != nil {
		return err
	}
	defer writer.Stop(30 * time.Second)
	fetcher, err := harness.Start(dir, filepath.Join(*bin, "ferry-fetcher"), "fetcher", fcfg)
	if err != nil {
		return err
	}
	defer fetcher.Stop(30 * time.Second)
	fmt.Printf("ferry-demo: writer  metrics http://%s/metrics  status http://%s/status\n", addrs["writer-admin"], addrs["writer-admin"])
	fmt.Printf("ferry-demo: fetcher metrics http://%s/metrics  status http://%s/status\n", addrs["fetcher-admin"], addrs["fetcher-admin"])

	prod, err := workload.NewProducer(source.ListenAddrs(), workload.Options{
		Topic: topic, Partitions: int32(*partitions), Records: *records, ValueBytes: *size, Seed: 1,
	})
	if err != nil {
		return err
	}
	defer prod.Close()
	prodErr := make(chan error, 1)
	go func() { prodErr <- prod.Run(ctx) }()

	fmt.Printf("ferry-demo: producing %d records of ~%d bytes over %d partitions while replicating\n", *records, *size, *partitions)
	start := time.Now()
	if err := watch(ctx, prod, prodErr, writer, fetcher, addrs["writer-admin"], int64(*records), start); err != nil {
		return err
	}
	elapsed := time.Since(start)
	fmt.Printf("ferry-demo: replicated %d records in %v (%.0f records/s); verifying\n",
		*records, elapsed.Round(time.Millisecond), float64(*records)/elapsed.Seconds())
	f, ferr := harness.CPUSeconds(fetcher.PID())
	w, werr := harness.CPUSeconds(writer.PID())
	if ferr == nil && werr == nil {
		gb := float64(*records) * float64(*size) / 1e9
		fmt.Printf("ferry-demo: replicator CPU: fetcher %.1fs, writer %.1fs (%.1f CPU s per GB of values)\n", f, w, (f+w)/gb)
	}
	res, err := verify.Compare(ctx, source.ListenAddrs(), target.ListenAddrs(), []verify.Pair{{Source: topic, Target: "source." + topic}})
	if err != nil {
		return err
	}
	if *follow {
		fmt.Println("ferry-demo: --follow: running until interrupted")
		<-ctx.Done()
	}
	if jaeger != nil {
		traceID, err := tracedRecord(ctx, jaeger, source.ListenAddrs(), topic)
		if err != nil {
			return err
		}
		fmt.Printf("ferry-demo: trace of a sampled record: http://%s/api/traces/%s\n", jaeger.QueryAddr(), traceID)
	}
	fmt.Println(res.Line())
	if !res.OK() {
		return errors.New("the target does not match the source")
	}
	return nil
}

// watch prints progress each second until the writer has written every
// produced record, or something fails.
func watch(ctx context.Context, prod *workload.Producer, prodErr <-chan error, writer, fetcher *harness.Process, writerAdmin string, want int64, start time.Time) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last float64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-prodErr:
			if err != nil {
				return fmt.Errorf("workload: %w", err)
			}
			prodErr = nil
		case <-writer.Done():
			return fmt.Errorf("writer exited: %v (see %s)", writer.Err(), writer.LogPath)
		case <-fetcher.Done():
			return fmt.Errorf("fetcher exited: %v (see %s)", fetcher.Err(), fetcher.LogPath)
		case <-tick.C:
			done, err := harness.Metric(ctx, writerAdmin, "ferry_writer_records_total")
			if err != nil {
				continue // the writer may still be starting
			}
			produced := prod.Produced()
			fmt.Printf("  %5.0fs  produced %9d  replicated %9d  rate %7.0f rec/s  lag %8d\n",
				time.Since(start).Seconds(), produced, int64(done), done-last, produced-int64(done))
			last = done
			if int64(done) >= want && prodErr == nil {
				return nil
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// tracedRecord produces one record inside a sampled trace, waits until
// Jaeger holds the fetcher's and writer's spans for it, and returns the
// trace id.
func tracedRecord(ctx context.Context, jaeger *jaegeragent.Agent, source []string, topic string) (string, error) {
	cfg := tracing.DefaultConfig()
	cfg.Endpoint, cfg.SamplingRatio = jaeger.OTLPGRPCAddr(), 1
	tp, shutdown, err := tracing.Setup(ctx, cfg, "demo-producer")
	if err != nil {
		return "", err
	}
	_, span := tp.Tracer("demo").Start(ctx, "produce order", trace.WithSpanKind(trace.SpanKindProducer))
	cl, err := kgo.NewClient(kgo.SeedBrokers(source...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: topic, Key: []byte("traced-order"), Value: []byte(`{"traced":true}`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tracing.FormatTraceparent(span.SpanContext()))}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return "", fmt.Errorf("produce traced record: %w", err)
	}
	span.End()
	_ = shutdown(ctx)
	id := span.SpanContext().TraceID().String()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := jaeger.WaitTrace(wctx, id, 3); err != nil {
		return "", fmt.Errorf("wait for trace %s: %w", id, err)
	}
	return id, nil
}
