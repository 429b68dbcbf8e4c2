"""The broker's `sasl.*` settings (Kafka's names and defaults, except the mechanisms: Kafka
enables GSSAPI, which needs Kerberos; Seaway enables both SCRAM mechanisms). What they do is in
core/security/sasl.py."""
from __future__ import annotations

from .defs import ConfigDef, ConfigType

_T = ConfigType

SASL_CONFIG_LIST = [
    ConfigDef("sasl.enabled.mechanisms", _T.LIST, ["SCRAM-SHA-256", "SCRAM-SHA-512"],
              "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ConfigDef("sasl.server.max.receive.size", _T.INT, 524_288,
              "largest frame a client may send before it has authenticated", minimum=1),
    ConfigDef("sasl.jaas.config", _T.PASSWORD, None,
              "JAAS login module line; for PLAIN its user_<name>=\"<password>\" options are the users",
              sensitive=True),
    ConfigDef("sasl.mechanism.inter.broker.protocol", _T.STRING, None,
              "the mechanism followers use on a SASL inter-broker listener (default: the first it enables)"),
    ConfigDef("sasl.mechanism.controller.protocol", _T.STRING, None,
              "the mechanism nodes use on a SASL controller listener (default: the first it enables)"),
    ConfigDef("connections.max.reauth.ms", _T.LONG, 0,
              "a SASL session's lifetime: the client must re-authenticate (KIP-368) before it ends, or "
              "its connection closes at its next request; 0: sessions never expire",
              minimum=0),
]
SASL_CONFIGS = {d.name: d for d in SASL_CONFIG_LIST}
