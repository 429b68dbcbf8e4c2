"""The metadata state machine: the in-memory image of the `__cluster_metadata` log, and the
KRaft controller that writes it (controller.py has the theory of operation)."""
from .common import ControllerResult
from .controller import HANDLED_APIS, QuorumController
from .image import (BrokerEndpoint, BrokerRegistration, MetadataDelta, MetadataImage,
                    MetadataImageError, PartitionRegistration, TopicImage,
                    UnsupportedMetadataRecord)
from .settings import ControllerConfig

__all__ = ["BrokerEndpoint", "BrokerRegistration", "ControllerConfig", "ControllerResult",
           "HANDLED_APIS", "MetadataDelta", "MetadataImage", "MetadataImageError",
           "PartitionRegistration", "QuorumController", "TopicImage",
           "UnsupportedMetadataRecord"]
