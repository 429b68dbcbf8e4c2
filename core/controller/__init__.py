"""The metadata state machine: the in-memory image of the `__cluster_metadata` log."""
from .image import (BrokerEndpoint, BrokerRegistration, MetadataDelta, MetadataImage,
                    MetadataImageError, PartitionRegistration, TopicImage,
                    UnsupportedMetadataRecord)

__all__ = ["BrokerEndpoint", "BrokerRegistration", "MetadataDelta", "MetadataImage",
           "MetadataImageError", "PartitionRegistration", "TopicImage",
           "UnsupportedMetadataRecord"]
