"""The application of Ferry's drill with clients outside Go (make
drill-outside; docs/disaster-recovery.md, "Checked with clients outside
Go"): a producer and a consumer group member written as a user would write
them, with confluent-kafka (librdkafka), and nothing of Ferry's.

    app.py produce --bootstrap HOST:PORT --topic T --partition P --count N
        [--first I] [--origin O] [--key-mod M] [--interval-ms MS]
    app.py consume --bootstrap HOST:PORT --group G --topics T1,T2
        --take T:P=N [--take ...]

produce writes N keyed records i = I .. I+N-1 to partition P, one at a time
(each acknowledged before the next, so --interval-ms paces them): key
"<origin>-<P>-<i>", or "k-<i mod M>" with --key-mod (keys repeated, for a
compacted topic); a value and headers that hold non-ASCII bytes, so a copy
is checked byte for byte. It prints nothing and exits 0 once all are
acknowledged.

consume joins group G (subscribe, read_committed, auto commit off,
auto.offset.reset earliest) and takes N records of each partition T:P
named (N = -1: up to the partition's end as the consumer first reaches
it), ignoring the others; then commits, synchronously, the offset after
the last record taken of each partition, leaves the group and exits 0. It
prints each record taken as a JSON line, then one line {"committed": [...]}.
"""

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def produce(a):
    p = Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for i in range(a.first, a.first + a.count):
        key = f"k-{i % a.key_mod}" if a.key_mod > 0 else f"{a.origin}-{a.partition}-{i}"
        value = f"{a.origin}|{a.topic}|{a.partition}|{i}|café ☕ {i * 7919:08x}"
        headers = [("origin", a.origin.encode()), ("seq", str(i).encode()), ("note", "über €".encode())]
        p.produce(a.topic, value=value.encode(), key=key.encode(), partition=a.partition,
                  headers=headers, on_delivery=delivered)
        # One at a time: each record acknowledged (and its offset taken)
        # before the next is sent, so the pacing rolls segments.
        if p.flush(30) != 0:
            sys.exit(f"produce {a.topic}/{a.partition} record {i}: not acknowledged in 30 s")
        if errors:
            sys.exit(f"produce {a.topic}/{a.partition} record {i}: {errors[0]}")
        if a.interval_ms:
            time.sleep(a.interval_ms / 1000)


def consume(a):
    take = {}
    for t in a.take:
        tp, n = t.rsplit("=", 1)
        topic, part = tp.rsplit(":", 1)
        take[(topic, int(part))] = int(n)
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })
    c.subscribe(a.topics.split(","))
    got = {tp: 0 for tp in take}
    last = {}  # the offset after the last record taken, per partition
    done = set(tp for tp, n in take.items() if n == 0)
    deadline = time.monotonic() + a.timeout
    while len(done) < len(take):
        if time.monotonic() > deadline:
            c.close()
            sys.exit(f"consume: took {got} records in {a.timeout} s, want {take}")
        m = c.poll(1.0)
        if m is None:
            continue
        tp = (m.topic(), m.partition())
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                if take.get(tp) == -1:
                    done.add(tp)
                continue
            c.close()
            sys.exit(f"consume {tp}: {m.error()}")
        if tp not in take or tp in done:
            continue  # not this run's to take: read again next time
        ts_type, ts = m.timestamp()
        print(json.dumps({
            "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
            "key": m.key().decode(), "value": m.value().decode(), "timestamp": ts,
            "headers": [[k, v.decode()] for k, v in (m.headers() or [])],
        }, ensure_ascii=False))
        got[tp] += 1
        last[tp] = m.offset() + 1
        if got[tp] == take[tp]:
            done.add(tp)
    commit = [TopicPartition(t, p, o) for (t, p), o in sorted(last.items())]
    if commit:
        for r in c.commit(offsets=commit, asynchronous=False):
            if r.error:
                c.close()
                sys.exit(f"commit {r.topic}/{r.partition}: {r.error}")
    # close leaves the group: the next run, on this cluster or after a
    # failover on the other, is not refused for a member still there.
    c.close()
    print(json.dumps({"committed": [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset} for tp in commit]}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--origin", default="app")
    p.add_argument("--key-mod", type=int, default=0)
    p.add_argument("--interval-ms", type=int, default=0)
    c = sub.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--group", required=True)
    c.add_argument("--topics", required=True)
    c.add_argument("--take", action="append", required=True)
    c.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    produce(a) if a.cmd == "produce" else consume(a)


if __name__ == "__main__":
    main()
