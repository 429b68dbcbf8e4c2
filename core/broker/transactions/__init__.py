"""Kafka transactions: the coordinator (pure: state.py, events.py, coordinator.py), the records
of `__transaction_state` and the driver that meets the log and the network."""
