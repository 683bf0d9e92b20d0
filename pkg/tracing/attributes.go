package tracing

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Span attributes after the OTel messaging semantic conventions (v1.43),
// plus Ferry's own under ferry.*. Each is a small function so a call site
// reads as what it records.
//
// Compute attributes only for a span that records: with tracing off or a
// batch not sampled, if span.IsRecording() { span.SetAttributes(...) }
// costs nothing, while trace.WithAttributes(...) at Start builds them
// anyway.

// Attribute keys of Ferry's own that no convention covers.
const (
	LinkKey            = attribute.Key("ferry.link")
	ShardKey           = attribute.Key("ferry.shard")
	EpochKey           = attribute.Key("ferry.epoch")
	LastOffsetKey      = attribute.Key("ferry.batch.last_offset")
	BatchBytesKey      = attribute.Key("ferry.batch.bytes")
	CompressedBytesKey = attribute.Key("ferry.batch.compressed_bytes")
	CodecKey           = attribute.Key("ferry.batch.codec")
	SequenceKey        = attribute.Key("ferry.batch.sequence")
	FetcherKey         = attribute.Key("ferry.fetcher")
	DeliveryKey        = attribute.Key("ferry.delivery")
)

// Messaging operation types (messaging.operation.type) of Ferry's stages:
// a batch is created (ferry.batch), received from the source or the stream
// (ferry.fetch, ferry.receive), sent to the target (ferry.produce), and
// settled once its checkpoint is committed (ferry.commit).
var (
	OpCreate  = semconv.MessagingOperationTypeCreate
	OpReceive = semconv.MessagingOperationTypeReceive
	OpSend    = semconv.MessagingOperationTypeSend
	OpSettle  = semconv.MessagingOperationTypeSettle
)

// Kafka is messaging.system=kafka.
func Kafka() attribute.KeyValue { return semconv.MessagingSystemKafka }

// Topic is messaging.destination.name: the topic a span reads or writes.
func Topic(name string) attribute.KeyValue { return semconv.MessagingDestinationName(name) }

// Partition is messaging.destination.partition.id, a string by convention.
func Partition(p int32) attribute.KeyValue {
	return semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(p), 10))
}

// Offset is messaging.kafka.offset: a record's offset, or a batch's first.
func Offset(o int64) attribute.KeyValue { return semconv.MessagingKafkaOffsetKey.Int64(o) }

// LastOffset is ferry.batch.last_offset, the offset of a batch's last record.
func LastOffset(o int64) attribute.KeyValue { return LastOffsetKey.Int64(o) }

// MessageCount is messaging.batch.message_count: the records in a batch.
func MessageCount(n int) attribute.KeyValue { return semconv.MessagingBatchMessageCount(n) }

// BodySize is messaging.message.body.size: one record's value in bytes.
func BodySize(n int) attribute.KeyValue { return semconv.MessagingMessageBodySize(n) }

// BatchBytes is ferry.batch.bytes: a batch's encoded records before
// compression.
func BatchBytes(n int) attribute.KeyValue { return BatchBytesKey.Int(n) }

// CompressedBytes is ferry.batch.compressed_bytes: a batch as it crosses the
// region boundary.
func CompressedBytes(n int) attribute.KeyValue { return CompressedBytesKey.Int(n) }

// LinkName is ferry.link, the name of the replication link (not a span
// link).
func LinkName(name string) attribute.KeyValue { return LinkKey.String(name) }

// Shard is ferry.shard.
func Shard(n int) attribute.KeyValue { return ShardKey.Int(n) }

// Epoch is ferry.epoch, the shard lease's epoch carried by the stream.
func Epoch(e int64) attribute.KeyValue { return EpochKey.Int64(e) }

// Codec is ferry.batch.codec, the compression of a batch's payload.
func Codec(name string) attribute.KeyValue { return CodecKey.String(name) }

// Sequence is ferry.batch.sequence, a batch's number on its stream, the
// number the writer's acknowledgements carry.
func Sequence(n uint64) attribute.KeyValue { return SequenceKey.Int64(int64(n)) }

// Fetcher is ferry.fetcher, the ID of the fetcher that opened a stream.
func Fetcher(id string) attribute.KeyValue { return FetcherKey.String(id) }

// Delivery is ferry.delivery, the link's guarantee: "at_least_once" or
// "exactly_once".
func Delivery(exactlyOnce bool) attribute.KeyValue {
	if exactlyOnce {
		return DeliveryKey.String("exactly_once")
	}
	return DeliveryKey.String("at_least_once")
}

// Stream is the set that names a shard's stream: link, shard and epoch.
// Stream spans and per-batch spans carry it alike, so a search by shard
// finds both.
func Stream(link string, shard int, epoch uint64) []attribute.KeyValue {
	return []attribute.KeyValue{LinkName(link), Shard(shard), Epoch(int64(epoch))}
}

// Batch is the usual set for a per-batch span: system, topic, partition,
// first and last offset, record count and uncompressed bytes.
func Batch(topic string, partition int32, firstOffset, lastOffset int64, records, bytes int) []attribute.KeyValue {
	return []attribute.KeyValue{
		Kafka(),
		Topic(topic),
		Partition(partition),
		Offset(firstOffset),
		LastOffset(lastOffset),
		MessageCount(records),
		BatchBytes(bytes),
	}
}
