package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-replicator/ferry/loadtest/harness"
	"github.com/ferry-replicator/ferry/loadtest/kafkabroker"
	"github.com/ferry-replicator/ferry/loadtest/workload"
	"github.com/ferry-replicator/ferry/pkg/tlsconfig/devcerts"
)

// TestRealKafkaTLS runs the link between two Apache Kafka brokers whose
// only client listeners are TLS with client certificates required, each
// cluster with its own CA: the fetcher reads the source and the writer
// writes the target with a client certificate from that cluster's CA, and
// the target must hold every record exactly once. First, a writer whose
// client certificate comes from the other cluster's CA, and a fetcher with
// no client certificate, must each stop with an error naming their cluster
// and write nothing. It fails, never skips, when Java or the jars are
// missing.
func TestRealKafkaTLS(t *testing.T) {
	ctx := context.Background()
	srcCA, dstCA := newKafkaCA(t, "source Kafka CA"), newKafkaCA(t, "target Kafka CA")
	src, dst := startTLSBrokers(t, srcCA, dstCA)

	e := newEnvOn(t, []string{src.Addr()}, []string{dst.Addr()})
	e.srcOpts = []kgo.Opt{kgo.DialTLSConfig(src.ClientTLS())}
	e.dstOpts = []kgo.Opt{kgo.DialTLSConfig(dst.ClientTLS())}
	fetcherTLS := kafkaClientTLS(t, e.dir, "fetcher-source", srcCA, srcCA)
	writerTLS := kafkaClientTLS(t, e.dir, "writer-target", dstCA, dstCA)
	e.createTopic("t.tls", 3, nil)

	t.Run("refused", func(t *testing.T) {
		wrongCA := kafkaClientTLS(t, e.dir, "writer-wrong-ca", srcCA, dstCA)
		noCert := map[string]any{"enabled": true, "ca_file": fetcherTLS["ca_file"]}
		writerAddr, writerAdmin, fetcherAdmin := freeAddr(t), freeAddr(t), freeAddr(t)
		wcfg := harness.WriterConfig("writer-wrong-ca", writerAddr, writerAdmin, e.dst,
			map[string]any{"name": "test", "naming": "prefix", "prefix": e.prefix})
		wcfg["target"] = map[string]any{"bootstrap_servers": e.dst, "tls": wrongCA}
		fcfg := harness.FetcherConfig("fetcher-no-cert", fetcherAdmin, "test", e.src, []string{writerAddr}, `t\..*`)
		fcfg["source"] = map[string]any{"bootstrap_servers": e.src, "tls": noCert}

		for _, c := range []struct {
			name, bin string
			cfg       map[string]any
			want      string // the cluster the error must name
		}{
			{"writer-wrong-ca", "ferry-writer", wcfg, "target cluster [" + dst.Addr() + "]"},
			{"fetcher-no-cert", "ferry-fetcher", fcfg, "source client"},
		} {
			p, err := harness.Start(e.dir, filepath.Join(binDir, c.bin), c.name, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(90 * time.Second):
				p.Kill()
				t.Fatalf("%s still running with a refused client certificate (log %s)", c.name, p.LogPath)
			}
			if p.Err() == nil {
				t.Errorf("%s exited cleanly, want a failure", c.name)
			}
			data, err := os.ReadFile(p.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			failure := lastLineWith(string(data), c.bin+" failed")
			if !strings.Contains(failure, c.want) || !strings.Contains(failure, "tls") {
				t.Errorf("%s: failure %q does not name %q and the TLS refusal; log:\n%s", c.name, failure, c.want, data)
			}
			t.Logf("%s: %s", c.name, failure)
		}
		// Nothing reached the target, not even the checkpoint topic.
		topics := listTopics(t, ctx, e.dst, e.dstOpts)
		if len(topics) != 0 {
			t.Fatalf("refused processes left topics on the target: %v", topics)
		}
	})
	if t.Failed() {
		return
	}

	e.writerExtra = map[string]any{"target": map[string]any{"bootstrap_servers": e.dst, "tls": writerTLS}}
	e.fetcherExtra = map[string]any{"source": map[string]any{"bootstrap_servers": e.src, "tls": fetcherTLS}}
	e.startWriter()
	e.startFetcher(nil)
	const records = 3000
	e.produce(ctx, workload.Options{Topic: "t.tls", Partitions: 3, Records: records, ValueBytes: 300, Seed: 9})
	e.waitFor(ctx, "src.t.tls", records)
	res := e.verify(ctx, "t.tls")
	if !res.OK() || res.Produced != records || res.Replicated != records {
		t.Fatalf("over Kafka TLS with client certificates: %+v", res)
	}
}

func newKafkaCA(t *testing.T, name string) *devcerts.CA {
	t.Helper()
	ca, err := devcerts.NewCA(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// startTLSBrokers starts the source and target brokers at once, each with
// a TLS-only client listener requiring a certificate from its CA.
func startTLSBrokers(t *testing.T, srcCA, dstCA *devcerts.CA) (src, dst *kafkabroker.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type result struct {
		b   *kafkabroker.Broker
		err error
	}
	results := [2]chan result{make(chan result, 1), make(chan result, 1)}
	for i, o := range []kafkabroker.Options{
		{Name: "source-tls", DataDir: keptDir(t, "kafka"), TLSCA: srcCA},
		{Name: "target-tls", DataDir: keptDir(t, "kafka"), TLSCA: dstCA},
	} {
		go func() {
			b, err := kafkabroker.Start(ctx, o)
			results[i] <- result{b, err}
		}()
	}
	var brokers [2]*kafkabroker.Broker
	var errs []error
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		brokers[i] = r.b
		t.Cleanup(func() { _ = r.b.Stop() })
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start Apache Kafka with TLS: %v", err)
	}
	return brokers[0], brokers[1]
}

// kafkaClientTLS writes a client certificate from certCA and the bundle of
// trustCA into dir, and returns the Kafka tls settings using them.
func kafkaClientTLS(t *testing.T, dir, name string, certCA, trustCA *devcerts.CA) map[string]any {
	t.Helper()
	leaf, err := certCA.Issue(devcerts.LeafOptions{
		CommonName: "ferry-" + name,
		NotBefore:  time.Now().Add(-5 * time.Minute),
		NotAfter:   time.Now().Add(24 * time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{name + ".pem": leaf.CertPEM, name + "-key.pem": leaf.KeyPEM, name + "-ca.pem": trustCA.CertPEM}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]any{
		"enabled":   true,
		"ca_file":   filepath.Join(dir, name+"-ca.pem"),
		"cert_file": filepath.Join(dir, name+".pem"),
		"key_file":  filepath.Join(dir, name+"-key.pem"),
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func lastLineWith(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

func listTopics(t *testing.T, ctx context.Context, addrs []string, opts []kgo.Opt) []string {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatalf("list target topics: %v", err)
	}
	return topics.Names()
}
