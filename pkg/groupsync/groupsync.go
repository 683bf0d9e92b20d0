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
	"strconv"
	"strings"
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

// DefaultInclude syncs every group the excludes leave.
var DefaultInclude = []string{`.*`}

// DefaultExclude leaves out what is not an application's consumer group:
// Kafka's and other tools' internal groups (two underscores, Confluent's),
// Kafka Connect's workers and connectors, and console consumers, which
// are throwaway (MirrorMaker 2's groups.exclude default, plus
// `_confluent.*`).
var DefaultExclude = []string{`__.*`, `_confluent.*`, `connect-.*`, `console-consumer-.*`}
