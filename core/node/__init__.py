"""The pieces of a node process that join its roles: the metadata loader every KRaft node runs,
and the controller listener's request table."""
