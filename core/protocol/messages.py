"""The registry of every API we speak, compiled from schema/*.ks at import.

    from core.protocol import messages as m
    req = m.ProduceRequest(acks=-1, topic_data=[m.ProduceRequest.TopicProduceData(name="t")])
    m.API[m.ApiKey.PRODUCE].request.encode(9, req)

Besides the APIs: the two headers, the versioned data structs (DATA, by name) and the records
of the metadata log (METADATA_RECORDS, by record type; METADATA_RECORDS_BY_NAME). Declaring an
API here does not advertise it: ApiVersions lists only the APIs the broker has handlers for.
The classes' types are in messages.pyi and the ApiKey enum (re-exported here, as m.ApiKey) in
api_keys.py, both generated from the schema by stubgen.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .api_keys import ApiKey
from .codegen import MessageCodec
from .dsl import ApiSchema, load_all


@dataclass
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    request: MessageCodec
    response: MessageCodec
    schema: ApiSchema
    # The flexible versions up to ours, worked out once: every request and response asks
    # for its header version, and the schema's answer takes three calls. A version above
    # ours (an ApiVersions from a newer client) still asks the schema.
    _flexible: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._flexible = frozenset(v for v in range(self.max_version + 1) if self.schema.request.is_flexible(v))

    def is_flexible(self, version: int) -> bool:
        return version in self._flexible or (version > self.max_version and self.schema.request.is_flexible(version))

    def request_header_version(self, version: int) -> int:
        return 2 if version in self._flexible or self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 whatever its version, so that a client that
        # does not yet know our versions can always parse the reply (KIP-511).
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if version in self._flexible or self.is_flexible(version) else 0

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_schemas, _headers = load_all()

API: dict[int, Api] = {}
API_BY_NAME: dict[str, Api] = {}
for _key, _schema in sorted(_schemas.items()):
    _api = Api(_key, _schema.name, _schema.versions.low, _schema.versions.high,
               MessageCodec(_schema.request), MessageCodec(_schema.response), _schema)
    API[_key] = API_BY_NAME[_schema.name] = _api
    globals()[_schema.request.name] = _api.request.cls
    globals()[_schema.response.name] = _api.response.cls

REQUEST_HEADER = MessageCodec(_headers["RequestHeader"])
RESPONSE_HEADER = MessageCodec(_headers["ResponseHeader"])
RequestHeader = REQUEST_HEADER.cls
ResponseHeader = RESPONSE_HEADER.cls

# Versioned structs that are not requests: the consumer protocol and __consumer_offsets records.
DATA: dict[str, MessageCodec] = {name: MessageCodec(spec) for name, spec in _headers.items()
                                 if spec.kind == "data"}
for _name, _codec in DATA.items():
    globals()[_name] = _codec.cls

# What the controller writes to __cluster_metadata (schema/metadata/*.ks), framed by
# metadata_records.py: record type (Kafka's "apiKey" of type "metadata") -> codec.
METADATA_RECORDS: dict[int, MessageCodec] = {}
METADATA_RECORDS_BY_NAME: dict[str, MessageCodec] = {}
for _name, _spec in sorted(_headers.items(), key=lambda kv: kv[1].api_key or 0):
    if _spec.kind != "record":
        continue
    _codec = METADATA_RECORDS[_spec.api_key] = METADATA_RECORDS_BY_NAME[_name] = MessageCodec(_spec)
    globals()[_name] = _codec.cls

del _key, _schema, _api, _name, _codec, _spec
