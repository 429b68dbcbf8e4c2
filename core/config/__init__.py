"""Kafka-style configuration: definitions of broker and topic settings, and their parsing.

Names, units and defaults are Kafka's, so that an operator's existing properties files and
tooling (kafka-configs, DescribeConfigs) mean the same thing here.
"""
from .defs import ConfigDef, ConfigError, ConfigType
from .broker import BrokerConfig, Listener, load_properties, parse_properties
from .topic import TOPIC_CONFIGS, TopicConfigs

__all__ = ["ConfigDef", "ConfigError", "ConfigType", "BrokerConfig", "Listener",
           "load_properties", "parse_properties", "TOPIC_CONFIGS", "TopicConfigs"]
