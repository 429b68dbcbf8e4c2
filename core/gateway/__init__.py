"""The Seaway gateway (issue 19): a Kafka-protocol proxy that applications bootstrap from and
that follows the DR controller's decision; endpoints.py says what clients learn of brokers
through it."""
