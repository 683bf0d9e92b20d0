package soak

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// change is ferryctl's failover report for partition soak.idem/0: the
// target committed up to committed, the last heartbeat's high watermark
// hw (and 1 offset estimated after it; of the offsets between, 2 records
// read and lost and 1 offset unread), and the application's group at
// source offset source, its target position standing for standsFor.
func change(t *testing.T, committed, hw, source, standsFor int64) ctlChange {
	t.Helper()
	var ch ctlChange
	js := fmt.Sprintf(`{"state":"failed_over",
		"at_risk":[{"topic":%q,"partition":0,"committed_next_offset":%d,"source_high_watermark":%d,"after_heartbeat_estimate_offsets":1,"lost_records":2,"unread_offsets":1}],
		"groups":[{"group":%q,"partitions":[{"topic":%q,"partition":0,"source_offset":%d,"target_stands_for_source_offset":%d}]}]}`,
		topicIdem, committed, hw, appGroup, topicIdem, source, standsFor)
	if err := json.Unmarshal([]byte(js), &ch); err != nil {
		t.Fatal(err)
	}
	return ch
}

// lastReadAt is the group's last read in reports elsewhere builds.
var lastReadAt = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// elsewhere is ch with the application group listed on partition 1 only,
// read at lastReadAt.
func elsewhere(t *testing.T, ch ctlChange) ctlChange {
	t.Helper()
	js := fmt.Sprintf(`[{"topic":%q,"partition":1,"source_offset":3,"target_stands_for_source_offset":3,"synced_read_at":%q}]`, topicIdem, lastReadAt.Format(time.RFC3339Nano))
	if err := json.Unmarshal([]byte(js), &ch.Groups[0].Partitions); err != nil {
		t.Fatal(err)
	}
	return ch
}

// withRecords is ch with lost records read and lost and unread offsets
// unread (nil: no count).
func withRecords(ch ctlChange, lost, unread *int64) ctlChange {
	ch.AtRisk[0].LostRecords, ch.AtRisk[0].Unread = lost, unread
	return ch
}

// withoutEstimate is ch without an estimate after the last heartbeat.
func withoutEstimate(ch ctlChange) ctlChange {
	ch.AtRisk[0].AfterHeartbeat = nil
	return ch
}

// uncounted is ch with the application group's partitions of topicIdem
// named as ones the meter could not count, as ferryctl's report names
// them (reread_uncounted: topic, partition, reason).
func uncounted(t *testing.T, ch ctlChange, partitions ...int32) ctlChange {
	t.Helper()
	var names []string
	for _, p := range partitions {
		names = append(names, fmt.Sprintf(`{"topic":%q,"partition":%d,"reason":"index_loading"}`, topicIdem, p))
	}
	if err := json.Unmarshal([]byte("["+strings.Join(names, ",")+"]"), &ch.Groups[0].Uncounted); err != nil {
		t.Fatal(err)
	}
	return ch
}

// logOf is a log holding the source records of the given offsets, in that
// order, from target offset 0 (the digest of source offset o is o+1000).
func logOf(sourceOffsets ...int64) []logRecord {
	out := make([]logRecord, len(sourceOffsets))
	for i, o := range sourceOffsets {
		out[i] = logRecord{offset: int64(i), digest: uint64(o + 1000)}
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func TestTallyAccountsForEveryRecord(t *testing.T) {
	srcKey, dstKey := tp{topicIdem, 0}, tp{targetPrefix + topicIdem, 0}
	src := map[tp][]logRecord{srcKey: logOf(span(0, 10)...)} // source offsets 0-9
	quiet := slog.New(slog.DiscardHandler)
	cases := []struct {
		name             string
		alo              bool
		target           []int64 // source offsets of the target's records, in order
		ch               ctlChange
		srcRead, dstRead []int64   // source offsets; target offsets
		srcFirst         time.Time // the application's first commit on the source partition
		reported         int64     // the failover meter's re-read offsets
		want             DR
		ok               bool
	}{{
		// 0-5 copied; 6-8 under the last heartbeat, lost as reported;
		// 9 accepted after it. The group synced at 3 stands for 2: 2 is
		// re-read as the meter said, 3 and 4 were committed after the
		// last sync.
		name: "exactly-once", target: span(0, 6), ch: change(t, 6, 9, 3, 2),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 1,
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1},
		ok:   true,
	}, {
		name: "the meter said less than was re-read", target: span(0, 6), ch: change(t, 6, 9, 3, 2),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 0,
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2},
	}, {
		// 3-5 written again after 0-5 (target offsets 6-8); the group at 5
		// stands for 5 (target offset 5), so the application reads the
		// second copies of 3 and 4, which no sync explains.
		name: "at-least-once second copies", alo: true, target: append(span(0, 6), 3, 4, 5), ch: change(t, 6, 9, 5, 5),
		srcRead: span(0, 5), dstRead: span(5, 9),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 2, RereadCopiedTwice: 2, AtLeastOnce: true},
		ok:   true,
	}, {
		name: "second copies in exactly-once", target: append(span(0, 6), 3, 4, 5), ch: change(t, 6, 9, 5, 5),
		srcRead: span(0, 5), dstRead: span(5, 9),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 2, RereadCopiedTwice: 2},
	}, {
		// Record 4 is missing below the committed offset, and 7 is on the
		// target above it: both misreported. The application skipped 2
		// and its first read on the target is 3, where its position
		// stands for 2.
		name: "misreported, skipped, mistranslated", target: []int64{0, 1, 2, 3, 5, 7}, ch: change(t, 6, 9, 2, 2),
		srcRead: span(0, 2), dstRead: []int64{3, 4},
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, Misreported: 2, LostInReport: 2, LostUnobserved: 1, AppMissing: 2, TranslationErrors: 1},
	}, {
		// The group has no target position on the partition (its index
		// was loading at the failover): the application reads the target
		// from its start, 0-4 again, which the meter cannot count;
		// ferryctl says so.
		name: "no target position, named uncounted", target: span(0, 6), ch: uncounted(t, change(t, 6, 9, 5, -1), 0),
		srcRead: span(0, 5), dstRead: span(0, 6),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 5, RereadUncounted: 5},
		ok:   true,
	}, {
		name: "no target position, not named", target: span(0, 6), ch: change(t, 6, 9, 5, -1),
		srcRead: span(0, 5), dstRead: span(0, 6),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 5, RereadUncounted: 5, UncountedUnnamed: 1},
	}, {
		// The report lists the group on another partition only, read at
		// T; the application first committed on this one after T, so no
		// read saw it there: its re-reads were committed after the last
		// sync (seed 751's partition it reached last).
		name: "first committed after the last read", target: span(0, 6), ch: elsewhere(t, change(t, 6, 9, 5, -1)),
		srcRead: span(0, 5), dstRead: span(0, 6), srcFirst: lastReadAt.Add(time.Second),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 5, RereadAfterSync: 5},
		ok:   true,
	}, {
		// The same, but first committed before that read: a read that
		// reached the writers should have seen it.
		name: "first committed before the last read, not listed", target: span(0, 6), ch: elsewhere(t, change(t, 6, 9, 5, -1)),
		srcRead: span(0, 5), dstRead: span(0, 6), srcFirst: lastReadAt.Add(-time.Second),
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 5, RereadUncounted: 5, UncountedUnnamed: 1},
	}, {
		// The source took 8 and 9 after its last heartbeat (at 8), one
		// more than the report's estimate.
		name: "lost beyond the estimate", target: span(0, 6), ch: change(t, 6, 8, 3, 2),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 1,
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimatedAfterHeartbeat: 1, BeyondEstimate: 1, LostInReport: 2, LostUnobserved: 2, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1},
	}, {
		// 6-8 missing: the report said 0 read and lost and 1 unread.
		name: "records misreported", target: span(0, 6), ch: withRecords(change(t, 6, 9, 3, 2), new(int64(0)), new(int64(1))),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 1,
		want: DR{EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1,
			ReportedUnread: 1, RecordsMisreported: 2},
	}, {
		// Exactly-once, 6 copied: 7 and 8 missing, the report said 3.
		name: "more records reported lost than missing", target: span(0, 7), ch: withRecords(change(t, 7, 9, 3, 2), new(int64(3)), new(int64(0))),
		srcRead: span(0, 5), dstRead: span(2, 7), reported: 1,
		want: DR{EstimatedAfterHeartbeat: 1, LostInReport: 2, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1,
			ReportedLostRecords: 3, RecordsMisreported: 1},
	}, {
		// At-least-once, 6 written before its checkpoint: among the 3
		// records read and lost, one is on the target.
		name: "at-least-once records copied past the checkpoint", alo: true, target: span(0, 7), ch: withRecords(change(t, 6, 9, 3, 2), new(int64(3)), new(int64(0))),
		srcRead: span(0, 5), dstRead: span(2, 7), reported: 1,
		want: DR{EstimatedAfterHeartbeat: 1, LostInReport: 2, LostUnobserved: 1, CopiedPastCheckpoint: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1,
			ReportedLostRecords: 3, AtLeastOnce: true},
		ok: true,
	}, {
		name: "no record count", target: span(0, 6), ch: withRecords(change(t, 6, 9, 3, 2), nil, nil),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 1,
		want: DR{EstimatedAfterHeartbeat: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1, RecordsUncounted: 1},
	}, {
		name: "no estimate", target: span(0, 6), ch: withoutEstimate(change(t, 6, 9, 3, 2)),
		srcRead: span(0, 5), dstRead: span(2, 6), reported: 1,
		want: DR{ReportedLostRecords: 2, ReportedUnread: 1, EstimateUnknown: 1, LostInReport: 3, LostUnobserved: 1, AppReread: 3, RereadKnown: 1, RereadAfterSync: 2, RereadReported: 1},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dr := DR{RereadReported: c.reported}
			tally(&dr, c.alo, c.ch, src, map[tp][]logRecord{dstKey: logOf(c.target...)},
				map[tp][]int64{srcKey: c.srcRead}, map[tp][]int64{dstKey: c.dstRead}, map[tp]time.Time{srcKey: c.srcFirst}, quiet)
			if fmt.Sprintf("%+v", dr) != fmt.Sprintf("%+v", c.want) {
				t.Errorf("tally:\n got %+v\nwant %+v", dr, c.want)
			}
			if dr.OK() != c.ok {
				t.Errorf("OK() = %v, want %v", dr.OK(), c.ok)
			}
		})
	}
}

// ferryctl's partial failover (exit 4) says what is missing in the JSON
// error on its last stderr line; anything else is kept as it is.
func TestParseCtlError(t *testing.T) {
	for in, want := range map[string]string{
		`{"verb":"failover","error":"partial: group soak-app has no target position","exit_code":4}` + "\n":    "partial: group soak-app has no target position",
		`{"verb":"failover","progress":"x"}` + "\n" + `{"verb":"failover","error":"partial: y","exit_code":4}`: "partial: y",
		"ferryctl failover: partial: z\n": "ferryctl failover: partial: z",
	} {
		if got := ctlError([]byte(in)); got != want {
			t.Errorf("ctlError(%q) = %q, want %q", in, got, want)
		}
	}
}
