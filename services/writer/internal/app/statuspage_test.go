package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-replicator/ferry/pkg/batch"
	ferryv1 "github.com/ferry-replicator/ferry/pkg/gen/ferry/v1"
	"github.com/ferry-replicator/ferry/pkg/tracing"
	"github.com/ferry-replicator/ferry/pkg/tracing/otlptest"
	"github.com/ferry-replicator/ferry/services/writer/internal/config"
	"github.com/ferry-replicator/ferry/services/writer/internal/groupsyncer"
	"github.com/ferry-replicator/ferry/services/writer/internal/heartbeat"
	"github.com/ferry-replicator/ferry/services/writer/internal/server"
)

// Names an attacker could choose: a consumer group and a fetcher id are
// free text (Kafka's topic names allow no '<', and the writer refuses
// them, so the topic cannot carry one). Were either rendered as markup,
// its handler would set window.pwned.
const (
	evilGroup   = `<img src=x onerror="window.pwned='group'">`
	evilFetcher = `<script>window.pwned='fetcher'</script>f1`
)

// The status page of a running writer on a kfake target, read in a real
// Chromium (Debian's chromium, driven with chromedp): after a copy, it
// shows the partition's lag in records and seconds, the partition the
// writer refused with its reason, and the group and fetcher names as the
// text they are, running nothing; with tracing.ui_url set, it links to the
// Jaeger UI's search for ferry-writer and to the trace of the batch the
// fetcher sampled, which the writer exported. A screenshot is kept as the test's
// artifact (go test -artifacts keeps it). Without chromium the test fails:
// `make chromium` installs it.
func TestStatusPageInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (%v): run `make chromium` (Debian's chromium package)", err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: spans reach the receiver soon
	spans := otlptest.Start(t)
	cfg, stop := runWriterWith(t, cluster.ListenAddrs()[0], func(c *config.Config) {
		c.Producer.MaxMessageBytes, c.Producer.MergeBelow = 100_000, 0
		c.Tracing.Endpoint, c.Tracing.UIURL = spans.Addr, "http://jaeger.example:16686"
		c.Links[0].Shards = 1 // one stream holds both partitions
	})
	defer stop()
	conn, err := grpc.NewClient(cfg.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A stream copies ten records of orders/0, a minute old, with a
	// heartbeat saying the source holds 40 and a group's offset; then a
	// record above producer.max_message_bytes stops orders/1.
	both := []*ferryv1.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}
	stream := openStream(ctx, t, conn, "f0", both)
	old, now := time.Now().Add(-time.Minute).UnixMilli(), time.Now().UnixMilli()
	send(t, stream, &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Heartbeat{Heartbeat: &ferryv1.Heartbeat{Epoch: 1, Partitions: []*ferryv1.PartitionHeartbeat{
		{Topic: "orders", Partition: 0, HighWatermark: 40, LogStartOffset: 0, HeadOffset: 39, HeadTimestamp: now, ObservedAt: now},
	}}}})
	group := &ferryv1.GroupOffset{Group: evilGroup, Partitions: []*ferryv1.GroupPartitionOffset{{Topic: "orders", Partition: 0, Offset: 5}}}
	send(t, stream, &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_GroupOffsets{
		GroupOffsets: &ferryv1.GroupOffsets{Epoch: 1, ReadAt: now, Groups: []*ferryv1.GroupOffset{group}},
	}})
	codecs, err := batch.NewCodecs(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer codecs.Close()
	var enc batch.Encoder
	for off := range int64(10) {
		enc.Append(off, old, []byte("k"), []byte("v"), nil)
	}
	copied := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
	copied.Sequence, copied.Epoch, copied.Topic, copied.Partition, copied.SourceHighWatermark = 1, 1, "orders", 0, 40
	// The fetcher sampled this batch: the writer follows its decision.
	sampled := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled,
	})
	copied.Traceparent = tracing.FormatTraceparent(sampled)
	send(t, stream, &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: copied}})
	waitAck(t, stream, 1)
	enc.Reset()
	enc.Append(41, now, []byte("big"), bytes.Repeat([]byte("x"), 150_000), nil)
	big := codecs.Seal(&enc, ferryv1.Codec_CODEC_NONE)
	big.Sequence, big.Epoch, big.Topic, big.Partition, big.SourceHighWatermark = 2, 1, "orders", 1, 42
	send(t, stream, &ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Batch{Batch: big}})
	if err := waitAck(t, stream, 2); err == nil {
		t.Fatal("the record above producer.max_message_bytes was acknowledged")
	}
	// The fetcher opens the shard again without the stopped partition,
	// and stays.
	again := openStream(ctx, t, conn, evilFetcher, both[:1])
	defer again.CloseSend()

	// The end state, in /status: the page is rendered from the same value.
	waitStatus(t, cfg.Admin.Listen, func(st pageStatus) bool {
		lagged := false
		for _, e := range st.Failover {
			lagged = lagged || (e.Topic == "orders" && e.Partition == 0 && e.Committed == 10 && e.Records == 30 && e.Seconds != nil)
		}
		active := false
		for _, s := range st.Shards {
			active = active || (s.Active && s.Fetcher == evilFetcher)
		}
		return lagged && active && len(st.Stopped) == 1 && len(st.Groups) == 1
	})

	traceID := sampled.TraceID().String()
	for deadline := time.Now().Add(30 * time.Second); !spans.Has(traceID); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no span of trace %s exported within 30s", traceID)
		}
	}

	page := readPage(t, browser, "http://"+cfg.Admin.Listen+"/")
	if page.title != "Ferry writer" {
		t.Errorf("page title %q, want Ferry writer", page.title)
	}
	if secs, err := strconv.ParseFloat(strings.TrimSuffix(page.lagSeconds, " s"), 64); page.lagRecords != "30" || err != nil || secs < 60 || secs > 120 {
		t.Errorf("orders/0 lag shown as %q records, %q, want 30 records and about a minute", page.lagRecords, page.lagSeconds)
	}
	if !strings.Contains(page.stopped, "record_too_large") || !strings.Contains(page.stopped, "orders/1 offset 41") {
		t.Errorf("stopped partitions shown as %q, want orders/1 record_too_large at offset 41", page.stopped)
	}
	if page.group != evilGroup {
		t.Errorf("group shown as %q, want the name as text %q", page.group, evilGroup)
	}
	if !strings.Contains(page.shards, evilFetcher) {
		t.Errorf("shards shown as %q, want the fetcher's name as text %q", page.shards, evilFetcher)
	}
	if want := "http://jaeger.example:16686/search?service=ferry-writer"; page.search != want {
		t.Errorf("Jaeger search link %q, want %q", page.search, want)
	}
	if want := []string{"http://jaeger.example:16686/trace/" + traceID}; !slices.Equal(page.traces, want) {
		t.Errorf("trace links %q, want %q", page.traces, want)
	}
	if page.elements != 0 || page.pwned != "" {
		t.Errorf("the page holds %d img or script elements and ran %q: a name was rendered as markup", page.elements, page.pwned)
	}
}

// openStream opens shard 0 of link east (two partitions of orders; the
// link has one shard) as fetcher, once the writer serves.
func openStream(ctx context.Context, t *testing.T, conn *grpc.ClientConn, fetcher string, parts []*ferryv1.TopicPartition) ferryv1.ReplicationService_ReplicateClient {
	t.Helper()
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		stream, err := ferryv1.NewReplicationServiceClient(conn).Replicate(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		open := &ferryv1.Open{Link: "east", Shard: 0, Epoch: 1, Fetcher: fetcher,
			Topics: []*ferryv1.TopicSpec{{Name: "orders", PartitionCount: 2}}, Partitions: parts}
		if err := stream.Send(&ferryv1.ReplicateRequest{Msg: &ferryv1.ReplicateRequest_Open{Open: open}}); err != nil {
			lastErr = err
			continue
		}
		resp, err := stream.Recv()
		if err == nil && resp.GetOpened() != nil {
			return stream
		}
		lastErr = err
	}
	t.Fatalf("no open within 30s: %v", lastErr)
	return nil
}

func send(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, req *ferryv1.ReplicateRequest) {
	t.Helper()
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
}

// waitAck waits for the ack of seq, or the stream's end.
func waitAck(t *testing.T, stream ferryv1.ReplicationService_ReplicateClient, seq uint64) error {
	t.Helper()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if resp.GetAck().GetSequence() >= seq {
			return nil
		}
	}
}

// pageStatus is what the test reads of /status.
type pageStatus struct {
	Shards   []server.ShardStatus      `json:"shards"`
	Failover []heartbeat.Exposure      `json:"failover"`
	Groups   []groupsyncer.Status      `json:"groups"`
	Stopped  []server.StoppedPartition `json:"stopped"`
}

// waitStatus polls /status until ok holds.
func waitStatus(t *testing.T, admin string, ok func(pageStatus) bool) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/status")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(body)
		var st pageStatus
		if json.Unmarshal(body, &st) == nil && ok(st) {
			return
		}
	}
	t.Fatalf("/status not as wanted within 30s; last:\n%s", last)
}

// shownPage is what the browser shows of the page.
type shownPage struct {
	title, lagRecords, lagSeconds, stopped, group, shards, pwned string
	elements                                                     int
	// search and traces are the hrefs of the links into the Jaeger UI.
	search string
	traces []string
}

// readPage loads url in a fresh headless Chromium (the flags
// docs/operations.md and the machine notes give: no sandbox as root, no
// background traffic to a closed network) and reads what it shows, with a
// full-page screenshot into the test's artifact directory.
func readPage(t *testing.T, browser, url string) shownPage {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1400, 1000),
	}
	// The browser lives as long as the allocator's context: bounded, so
	// a stuck Chromium fails the test instead of hanging it.
	life, cancelLife := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelLife()
	actx, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		t.Fatalf("chromium on %s: %v", url, err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("chromium on %s: HTTP %d, want the status page", url, resp.Status)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#partitions"))); err != nil {
		t.Fatalf("chromium on %s: %v", url, err)
	}
	must := func(v string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("chromium on %s: %v", url, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		return must(chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel))))
	}
	p := shownPage{
		title:      must(chromedp.Run(ctx, chromedp.Title())),
		lagRecords: text("#partitions td.lag-records"),
		lagSeconds: text("#partitions td.lag-seconds"),
		stopped:    text("#stopped"),
		group:      text("#groups td.group"),
		shards:     text("#shards"),
		pwned:      must(chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.pwned || "")`))),
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("body img, body script").length`))
	if err != nil {
		t.Fatal(err)
	}
	p.elements = n
	// The links' hrefs as the browser resolved them, "" and none without.
	p.search = must(chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("#trace-search") || {}).href || ""`)))
	if p.traces, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#traces a.trace"), a => a.href)`)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), "statuspage.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return p
}
