// Package groupsync holds what both tiers agree on about consumer-group
// sync: which groups a link syncs by default, and the marker that tells
// offsets Ferry committed from anyone else's.
//
// Fetchers read the committed offsets of the source's groups and send them
// on the stream; writers translate them through the offset index and commit
// them to the same groups on the target, with Marker in the commit
// metadata. A fetcher skips every offset carrying the marker: in
// active-active, or after a failback, the groups Ferry wrote into a
// cluster must not be read back as if consumers had committed them there.
package groupsync

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MarkerPrefix starts the metadata of every offset Ferry commits:
// "ferry:v1:<source offset>".
const MarkerPrefix = "ferry:v1:"

// Marker is the commit metadata of a translated offset: the source offset
// it came from, so an operator (and ferryctl) can read the source position
// back from the target alone.
func Marker(sourceOffset int64) string {
	return MarkerPrefix + strconv.FormatInt(sourceOffset, 10)
}

// IsFerry reports whether commit metadata is Ferry's marker.
func IsFerry(metadata string) bool { return strings.HasPrefix(metadata, MarkerPrefix) }

// ParseMarker reads the source offset Ferry's marker names; ok is false
// for any other metadata, a marker Ferry never writes included.
func ParseMarker(metadata string) (sourceOffset int64, ok bool) {
	rest, found := strings.CutPrefix(metadata, MarkerPrefix)
	if !found {
		return 0, false
	}
	v, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// DefaultInclude syncs every group the excludes leave.
var DefaultInclude = []string{`.*`}

// DefaultExclude leaves out what is not an application's consumer group:
// Kafka's and other tools' internal groups (two underscores, Confluent's),
// Kafka Connect's workers and connectors, and console consumers, which
// are throwaway (MirrorMaker 2's groups.exclude default, plus
// `_confluent.*`).
var DefaultExclude = []string{`__.*`, `_confluent.*`, `connect-.*`, `console-consumer-.*`}

// MaxEntries bounds the partition offsets of one GroupOffsets message: a
// fetcher splits a larger read into several messages (each carries whole
// groups), and a writer refuses a message above it, so one message stays
// some hundreds of kilobytes whatever the groups.
const MaxEntries = 10000

// MaxGroups bounds the groups one link syncs (link.groups.max at most):
// the writer keeps state per group and exports a series per group, so
// both stay bounded whatever the source holds.
const MaxGroups = 10000

// MaxNameBytes bounds a group id on the wire. Kafka itself takes longer
// ones; a group with a longer id is not synced (the fetcher leaves it out
// and counts it), because a writer must bound what a peer makes it keep.
const MaxNameBytes = 255

// CheckName says why a group id cannot travel to the writers, nil when
// it can: empty, longer than MaxNameBytes, not UTF-8, or holding control
// characters (it becomes a metric label and a log field).
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("empty group id")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("group id of %d bytes, above %d", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return errors.New("group id is not UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return errors.New("group id holds a control character")
	}
	return nil
}

// Reread is how many records a group would read again on one partition if
// it failed over now: from the source offset its target position stands
// for (standsFor) up to the source offset it has read (sourceOffset),
// capped at the partition's committed end on the target (committed; -1:
// not known). What the group read beyond that end is not read again: it
// is lost with the source, and the partition's loss meter counts it. The
// writers' meter and ferryctl's merged report both count it this way.
func Reread(sourceOffset, standsFor, committed int64) int64 {
	read := sourceOffset
	if committed >= 0 {
		read = min(read, committed)
	}
	return max(0, read-standsFor)
}
