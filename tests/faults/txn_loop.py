"""One consume-transform-produce loop, as a process the transactional fault run can kill -9.

    python tests/faults/txn_loop.py --bootstrap HOST:PORT --slot 0

It reads `txn-input` in the consumer group `txn-loop` (read_committed), and for each batch it
polls writes "out:<value>" to `txn-output` (same partition) and the batch's next offsets, in
one transaction, then commits: Kafka's exactly-once recipe (KIP-98, KIP-447). Its
transactional.id is fixed per slot, so a restarted loop fences the one it replaces.

Any error that is not retriable ends the process with status 3 (the harness starts it again,
which reads the committed offsets afresh): the simplest recovery that is always correct. Every
transaction's outcome is printed as one JSON line, {"slot", "n", "outcome", "values"}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

INPUT, OUTPUT, GROUP = "txn-input", "txn-output", "txn-loop"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--slot", type=int, required=True)
    ap.add_argument("--batch", type=int, default=20, help="most records per transaction")
    args = ap.parse_args(argv)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": GROUP, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, "log_level": 3,
                         "client.id": f"txn-loop-{args.slot}"})
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"txn-loop-{args.slot}",
                         "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000,
                         "request.timeout.ms": 5000, "socket.timeout.ms": 5000, "log_level": 3,
                         "client.id": f"txn-loop-{args.slot}"})
    producer.init_transactions(60)
    consumer.subscribe([INPUT])
    n = 0
    try:
        while True:
            msgs = [m for m in consumer.consume(args.batch, 1.0) if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(OUTPUT, value=b"out:" + m.value(), partition=m.partition())
            ends: dict[int, int] = {}
            for m in msgs:
                ends[m.partition()] = m.offset() + 1
            producer.send_offsets_to_transaction([TopicPartition(INPUT, p, o) for p, o in ends.items()],
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            print(json.dumps({"slot": args.slot, "n": n, "outcome": "commit",
                              "values": [m.value().decode() for m in msgs]}), flush=True)
            n += 1
    except KafkaException as exc:
        err = exc.args[0]
        print(json.dumps({"slot": args.slot, "n": n, "outcome": "error", "error": str(err)}), flush=True)
        return 3
    except KeyboardInterrupt:
        return 0
    finally:
        # no close(): a crash leaves the group and the transaction as a kill would
        time.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
