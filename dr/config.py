"""What the DR controller is told: its DR pairs (each cluster's name, region, bootstrap and
client properties), which topics the pairs carry, its state directory and its timeouts.

    dr --platform ...            # the pairs of the platform `regions up` runs (platform.json)
    dr --config dr.yaml ...      # anywhere else (compose, a real deployment)

dr.yaml:

    state_dir: /var/lib/seaway-dr       # history, decisions, the active-region files
    regions: [eu-west, us-east]
    pairs:
      - first:  {cluster: eu-west-1, region: eu-west, bootstrap: "eu1:9092", properties_file: admin.properties}
        second: {cluster: us-east-1, region: us-east, bootstrap: "us1:9092", properties_file: admin.properties}
        topics: [".*"]                  # the mirror links' topic patterns
        gateways:                       # optional: the pair's gateways, which `dr status` shows
          - {region: eu-west, bootstrap: "127.0.0.1:31092,127.0.0.1:31093", metrics: "http://127.0.0.1:31190/metrics"}
    console:                            # optional: the console `dr serve` serves on /
      prometheus_url: http://prometheus:9090    # charts and alerts from here; without it the
      targets:                                  # console scrapes these itself (an hour kept)
        - {url: "http://eu1:9094/metrics", labels: {job: seaway-nodes, region: eu-west, cluster: eu-west-1}}
      operators: ["User:ops"]           # may fail over from the page, besides super users
      link_capacity_mbit: {"eu-west-1->us-east-1": 100}

The controller needs an admin login on every cluster (it changes topic configs, reads and
commits group offsets, writes `__seaway_dr`). The platform's is the admin user's properties
file that `regions up` writes. Errors are one line naming the field.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.client.acl_admin import checked_user_principals
from core.client.properties import PropertiesFileError, read_properties
from core.client.security import ClientSecurity, checked_properties, security_from_properties
from core.platform_file import PLATFORM_FILE, default_state_dir

from mirror.policy import TopicFilter

from .plan import DrPair
from .schedule import drill_trigger

# The mirror's default exclusions, which DR topics follow too (mirror/link.py LinkConfig).
DEFAULT_EXCLUDE = [r".*[\-\.]internal", r".*\.replica", r"__.*"]


class DrConfigError(Exception):
    """One line: which file, which field, what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterAccess(_Strict):
    cluster: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    region: str = Field(min_length=1, max_length=64)
    bootstrap: str = Field(min_length=1)
    properties: dict[str, str] = Field(default_factory=dict)
    properties_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, data):
        if isinstance(data, dict) and data.get("properties_file"):
            try:
                from_file = read_properties(str(data["properties_file"]))
            except PropertiesFileError as exc:
                raise ValueError(f"properties_file: {exc}") from None
            data = {**data, "properties": {**from_file, **(data.get("properties") or {})}}
        return data

    _security_works = field_validator("properties")(checked_properties)

    def security(self) -> ClientSecurity:
        return security_from_properties(self.properties)


class GatewayAccess(_Strict):
    """A gateway of the pair (`seaway gateway`): where its clients bootstrap, and its /metrics,
    which says what it serves. Only shown: the controller never needs a gateway."""
    region: str = Field(min_length=1, max_length=64)
    bootstrap: str = Field(min_length=1)
    metrics: str

    @field_validator("metrics")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+/\S*", value):
            raise ValueError(f"{value!r} is not the http:// URL of the gateway's /metrics")
        return value


class PairConfig(_Strict):
    first: ClusterAccess
    second: ClusterAccess
    topics: list[str] = Field(default_factory=lambda: [".*"], min_length=1)
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    gateways: list[GatewayAccess] = Field(default_factory=list)

    @model_validator(mode="after")
    def _two_clusters(self):
        TopicFilter(tuple(self.topics), tuple(self.exclude))     # ValueError names the bad pattern
        if self.first.cluster == self.second.cluster:
            raise ValueError("a DR pair joins two different clusters")
        if self.first.region == self.second.region:
            raise ValueError("a DR pair joins clusters in two different regions")
        return self

    @property
    def pair(self) -> DrPair:
        return DrPair(self.first.cluster, self.second.cluster, self.first.region, self.second.region)

    def access(self, cluster: str) -> ClusterAccess:
        return self.first if cluster == self.first.cluster else self.second


class ConsoleTarget(_Strict):
    url: str
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^http://[^/\s]+(/\S*)?$", value):
            raise ValueError(f"{value!r} is not an http:// URL")
        return value


class ConsoleSettings(_Strict):
    """The console `dr serve` serves (dr/console/)."""
    enabled: bool = True
    # Where the charts' history and the alerts come from; None: the console scrapes the
    # platform itself (`targets`, or the local platform's endpoints) and keeps the last hour.
    prometheus_url: str | None = None
    # Principals besides the clusters' super users that may start failovers from the page.
    operators: list[str] = Field(default_factory=list)
    targets: list[ConsoleTarget] = Field(default_factory=list)
    # Each mirror link's WAN capacity (Mbit/s, per direction), by link name (source->target).
    link_capacity_mbit: dict[str, float] = Field(default_factory=dict)
    alert_rules: str | None = None      # a rule file; None: the rules shipped with Seaway

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^http://[^/\s]+/?$", value):
            raise ValueError(f"{value!r} is not an http://host:port URL")
        return value

    _operators_are_principals = field_validator("operators")(checked_user_principals)


class DrConfig(_Strict):
    state_dir: str
    regions: list[str] = Field(min_length=1)
    pairs: list[PairConfig] = Field(default_factory=list)
    drain_timeout_s: float = Field(default=60.0, gt=0)      # planned failover: the link's last records
    groups_timeout_s: float = Field(default=30.0, gt=0)     # planned failover: consumers leaving the old side
    # Planned failover: how long a transaction open on the fenced topics may take to end by
    # itself before its producer is fenced (its transaction aborted) so that the drain can end.
    transactions_grace_s: float = Field(default=10.0, ge=0)
    rpo_target_s: float = Field(default=60.0, gt=0)
    rto_target_s: float = Field(default=300.0, gt=0)
    drill_schedule: str | None = None
    # Fail over by itself (dr serve) once the active region has been unreachable this long, from
    # the controller and from its partner (dr/autofailover.py); None: never, people decide.
    auto_failover_after_s: float | None = Field(default=None, ge=10)
    # The local platform's state directory (`dr --platform` sets it): a full drill asks its
    # supervisor to kill a region and start it again. None for clusters dr does not run.
    platform_dir: str | None = None
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)

    @field_validator("drill_schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            drill_trigger(value)        # ScheduleError (a ValueError) says what is wrong
        return value

    @model_validator(mode="after")
    def _pairs_in_regions(self):
        for i, p in enumerate(self.pairs):
            for side in (p.first, p.second):
                if side.region not in self.regions:
                    raise ValueError(f"pairs[{i}]: region {side.region!r} is not in regions")
            for j, gateway in enumerate(p.gateways):
                if gateway.region not in self.regions:
                    raise ValueError(f"pairs[{i}].gateways[{j}]: region {gateway.region!r} is not in regions")
        return self

    def pair_config(self, pair: DrPair) -> PairConfig:
        for p in self.pairs:
            if p.pair == pair:
                return p
        raise DrConfigError(f"no DR pair {pair.name} in the configuration (it was changed since "
                            f"the failover began?)")


def load_config(path: Path) -> DrConfig:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise DrConfigError(f"{path}: cannot read the DR configuration: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise DrConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise DrConfigError(f"{path}: the DR configuration is a mapping with a `pairs` key")
    return _validated(data, str(path))


def _validated(data: dict, source: str) -> DrConfig:
    try:
        return DrConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "configuration"
        message = "required field missing" if first["type"] == "missing" else \
            "unknown field" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        raise DrConfigError(f"{source}: {where}: {message}") from None


def platform_config(state_dir: Path | None = None) -> DrConfig:
    """The DR configuration of the platform `regions up` runs in `state_dir`: its topology's
    DR pairs (identity links), each cluster's client bootstrap, the admin user's properties,
    the pairs' gateways, and `<state dir>/dr` for the controller's own state."""
    from regions.topology import TopologyError, load_topology

    state_dir = Path(state_dir or default_state_dir())
    path = state_dir / PLATFORM_FILE
    try:
        info = json.loads(path.read_text())
        topology = load_topology(Path(info["topology"]))
        security = info.get("security")
        admin_file = security["client_properties"][security["admin_user"]] if security else None
        clusters = {name: (c["region"], c["bootstrap"]) for name, c in info["clusters"].items()}
        gateways = [(g["pair"], {"region": g["region"], "bootstrap": g["bootstrap"], "metrics": g["metrics"]})
                    for g in info.get("gateways") or []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DrConfigError(f"no running platform in {state_dir} (start one with `regions up`, or give "
                            f"--config dr.yaml): {type(exc).__name__}: {exc}") from None
    except TopologyError as exc:
        raise DrConfigError(str(exc)) from None

    def access(name: str) -> dict:
        if name not in clusters:
            raise DrConfigError(f"{path}: the platform has no cluster {name!r}, which its topology names")
        region, bootstrap = clusters[name]
        side = {"cluster": name, "region": region, "bootstrap": bootstrap}
        if admin_file is not None:
            side["properties_file"] = admin_file
        return side

    pairs = [{"first": access(m.source), "second": access(m.target), "topics": list(m.topics),
              **({"exclude": list(m.exclude)} if m.exclude else {}),
              "gateways": [g for pair, g in gateways if pair == f"{m.source}~{m.target}"]}
             for m in topology.dr_pairs()]
    dr = topology.dr
    return _validated({"state_dir": str(state_dir / "dr"), "regions": list(topology.regions), "pairs": pairs,
                       "rpo_target_s": dr.rpo_target_s, "rto_target_s": dr.rto_target_s,
                       "drill_schedule": dr.drill_schedule, "auto_failover_after_s": dr.auto_failover_after_s,
                       "platform_dir": str(state_dir),
                       "console": {"operators": list(dr.operators), "link_capacity_mbit": topology.link_capacity_mbit()}}, str(path))
