// Package observability builds Ferry's Grafana dashboard as code with the
// Grafana Foundation SDK, and holds the tests of everything under
// deploy/observability: the dashboard JSON checked in is what Dashboard
// builds, the Prometheus rules pass promtool, and every ferry_ metric the
// dashboard and the rules name is exported by a running fetcher or writer.
//
// Regenerate the JSON after a change here with `make dashboard`.
package observability

//go:generate go run ./gen ferry-dashboard.json

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's uid: stable, so links and provisioning survive
// a re-import.
const UID = "ferry-replication"

// linkSel narrows every query to the links chosen in the link variable.
const linkSel = `link=~"$link"`

// datasource is the Prometheus the datasource variable picks.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// query is one PromQL target with its legend.
type query struct {
	expr, legend string
}

// JSON is the dashboard as Grafana imports it, indented and ending in a
// newline, as checked in at deploy/observability/ferry-dashboard.json.
func JSON() ([]byte, error) {
	d, err := Dashboard().Build()
	if err != nil {
		return nil, fmt.Errorf("build dashboard: %w", err)
	}
	numberPanels(&d)
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

// Dashboard describes Ferry's dashboard: throughput, lag, latency,
// failover readiness and the health of leases, streams and writers, by
// link. Panels that need deduplication across writers (the heartbeat
// derived gauges) read the recording rules of ferry-rules.yaml.
func Dashboard() *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder("Ferry replication").
		Uid(UID).
		Description("Ferry cross-region Kafka replication: throughput, lag, latency, failover readiness and health, by link. Needs the recording rules of deploy/observability/ferry-rules.yaml.").
		Tags([]string{"ferry", "kafka", "replication"}).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("link").Label("Link").
			Datasource(datasource).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(ferry_writer_records_total, link)")}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).IncludeAll(true).AllValue(".*"))

	b = b.WithRow(dashboard.NewRowBuilder("Throughput")).
		WithPanel(series("Records per second", "Records acknowledged by the target (writer) and read from the source (fetcher), per link.", "rps",
			query{`sum by (link) (rate(ferry_writer_records_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} written"},
			query{`sum by (link) (rate(ferry_fetcher_records_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} read"})).
		WithPanel(series("Bytes per second", "Record bytes written to the target, and compressed bytes on the wire between the regions, per link.", "Bps",
			query{`sum by (link) (rate(ferry_writer_bytes_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} written"},
			query{`sum by (link) (rate(ferry_fetcher_wire_bytes_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} on the wire"})).
		WithPanel(series("Wire compression ratio", "Bytes the fetchers send before the link's compression over the bytes on the wire (1: no saving).", "none",
			query{`sum by (link) (rate(ferry_fetcher_bytes_total{` + linkSel + `}[$__rate_interval])) / sum by (link) (rate(ferry_fetcher_wire_bytes_total{` + linkSel + `}[$__rate_interval]))`, "{{link}}"}))

	b = b.WithRow(dashboard.NewRowBuilder("Lag and latency")).
		WithPanel(series("Lag in records per partition", "Source high watermark minus the committed next offset (ferry_lag_records), as the fetcher running the shard sees it.", "short",
			query{`max by (link, topic, partition) (ferry_lag_records{` + linkSel + `})`, "{{link}} {{topic}}/{{partition}}"})).
		WithPanel(series("Lag in seconds per partition", "Source time between the source's newest record and the newest one committed on the target (ferry_failover_exposure_seconds), from the writer with the freshest heartbeat.", "s",
			query{`link_topic_partition:ferry_lag_seconds:freshest{` + linkSel + `}`, "{{link}} {{topic}}/{{partition}}"})).
		WithPanel(series("Replication latency", "Source record timestamp to target acknowledgement, percentiles per link.", "s",
			latency(0.5), latency(0.9), latency(0.99))).
		WithPanel(series("Latency per stage (p99)", "Where the time goes: source append to fetched (fetch), fetched to received by the writer (transit), received to committed on the target (commit).", "s",
			query{`histogram_quantile(0.99, sum by (link, stage, le) (rate(ferry_replication_stage_seconds_bucket{` + linkSel + `}[$__rate_interval])))`, "{{link}} {{stage}}"}))

	b = b.WithRow(dashboard.NewRowBuilder("Failover")).
		WithPanel(series("Failover meter: records at risk", "Records the source held at its last heartbeat that the target has not committed: lost if the source died now (ferry_failover_exposure_records, freshest writer, summed per link).", "short",
			query{`sum by (link) (link_topic_partition:ferry_failover_exposure_records:freshest{` + linkSel + `})`, "{{link}}"})).
		WithPanel(series("Failover meter per group: records re-read", "Records each consumer group would read again after a failover now (ferry_failover_reread_records).", "short",
			query{`link_group:ferry_failover_reread_records:min{` + linkSel + `}`, "{{link}} {{group}}"})).
		WithPanel(series("Group sync age", "Age of the source read each group's target position last followed (ferry_group_sync_age_seconds): about link.groups.interval when healthy.", "s",
			query{`link_group:ferry_group_sync_age_seconds:min{` + linkSel + `}`, "{{link}} {{group}}"})).
		WithPanel(series("Heartbeat age (oldest partition)", "Age of the last heartbeat of the link's most silent partition (ferry_heartbeat_age_seconds, freshest writer): rises while the source or its fetchers are gone.", "s",
			query{`max by (link) (link_topic_partition:ferry_heartbeat_age_seconds:min{` + linkSel + `})`, "{{link}}"}))

	b = b.WithRow(dashboard.NewRowBuilder("Health")).
		WithPanel(series("Lease moves", "Shard leases taken, given back after a drain, and lost (session not renewed), all fetchers; and shards of the link no fetcher holds.", "short",
			query{`sum(increase(ferry_lease_acquisitions_total[$__rate_interval]))`, "acquired"},
			query{`sum(increase(ferry_lease_releases_total[$__rate_interval]))`, "released"},
			query{`sum(increase(ferry_lease_losses_total[$__rate_interval]))`, "lost"},
			query{`link:ferry_shards_unowned:max{` + linkSel + `}`, "{{link}} shards without a holder"})).
		WithPanel(series("Fencing", "Opens or batches writers refused for a stale epoch (ferry_writer_fencing_events_total): two fetchers claimed a shard.", "short",
			query{`sum by (link) (increase(ferry_writer_fencing_events_total{` + linkSel + `}[$__rate_interval]))`, "{{link}}"})).
		WithPanel(series("Data-loss events", "Anomalies where going on would skip data (ferry_data_loss_events_total): the partition stops unless on_data_loss: skip. Anything here needs an operator.", "short",
			query{`sum by (link, topic, partition, reason) (increase(ferry_data_loss_events_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} {{topic}}/{{partition}} {{reason}}"})).
		WithPanel(series("Stream restarts", "Shard streams that failed and were reopened, by reason (ferry_fetcher_stream_restarts_total).", "short",
			query{`sum by (link, reason) (increase(ferry_fetcher_stream_restarts_total{` + linkSel + `}[$__rate_interval]))`, "{{link}} {{reason}}"})).
		WithPanel(readiness()).
		WithPanel(stat.NewPanelBuilder().Title("Certificate expiry").
			Description("Time until the first TLS certificate of the gRPC link expires (ferry_tls_certificate_expiry_timestamp_seconds).").
			Datasource(datasource).Unit("s").Span(6).Height(6).
			GraphMode(common.BigValueGraphModeNone).
			WithTarget(target(query{`min(ferry_tls_certificate_expiry_timestamp_seconds) - time()`, "expires in"})))
	return b
}

// numberPanels gives every panel and row a unique id, in order: Grafana
// would make them up on import, and links to a panel (viewPanel=N) need
// them stable.
func numberPanels(d *dashboard.Dashboard) {
	for i := range d.Panels {
		id := uint32(i + 1)
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
}

// latency is the q-quantile of the replication latency per link.
func latency(q float64) query {
	return query{
		fmt.Sprintf(`histogram_quantile(%g, sum by (link, le) (rate(ferry_replication_latency_seconds_bucket{`+linkSel+`}[$__rate_interval])))`, q),
		fmt.Sprintf("{{link}} p%g", q*100),
	}
}

// readiness shows 1 for each writer that can work and 0 for one that
// cannot (its /readyz fails): writers are the processes exporting
// ferry_writer_streams_active.
func readiness() *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title("Writer readiness").
		Description("1: the writer can work; 0: its /readyz fails (target or checkpoint view unusable). With the shard streams each serves.").
		Datasource(datasource).Span(6).Height(6).
		ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
			{Color: "red"}, {Value: cog.ToPtr(1.0), Color: "green"},
		})).
		WithTarget(target(query{`ferry_ready and on (job, instance) ferry_writer_streams_active`, "{{instance}}"}))
}

// series is a time series panel of the queries, half the width.
func series(title, description, unit string, queries ...query) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).
		Datasource(datasource).Unit(unit).Min(0).Span(12).Height(8).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true))
	for _, q := range queries {
		p = p.WithTarget(target(q))
	}
	return p
}

func target(q query) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(q.expr).LegendFormat(q.legend)
}
