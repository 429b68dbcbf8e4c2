"""Our schema (core/protocol/schema/**/*.ks) against Kafka's JSON message specs.

For every API we register and every version we advertise, for both headers, for the consumer
protocol and KRaft's control record structs, and for every metadata record and every version
Kafka defines for it, the fields present at that version must agree with Kafka's: names and
order of the non-tagged fields (the order is the wire format), types, struct names,
nullability, tags, defaults and the flexible/non-flexible switch. Kafka's specs are a reference
kept outside the project (`<repo>/../shared/kafka-protocol/messages` and `metadata-records`);
the test is skipped only when they are absent.

A version newer than the reference is allowed only from NEWER_THAN_REFERENCE, which says why
and which fields it adds; such a version must equal the reference's newest plus exactly those
fields, and every version the reference knows is still checked exactly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from core.protocol import dsl, messages

REPO = Path(__file__).resolve().parents[2]
KAFKA_MESSAGES = REPO.parent / "shared" / "kafka-protocol" / "messages"
KAFKA_METADATA_RECORDS = REPO.parent / "shared" / "kafka-protocol" / "metadata-records"


class Added(NamedTuple):
    """A field that a version newer than the reference adds, and where it sits on the wire."""
    path: str    # dotted, from the top level: "Topics.Partitions.PreVote"
    type: str    # as Kafka would spell it: "bool", "[]int32"
    after: str | None  # the non-tagged field it follows in its struct; None: first


@dataclass(frozen=True)
class NewerVersion:
    why: str
    added: dict[str, tuple[Added, ...]]  # "request" / "response" -> fields added in this version


# (API key, version) -> why we declare a version that the reference specs (an older Kafka) lack.
# Keep entries only while the reference lacks them: a test fails once it catches up.
NEWER_THAN_REFERENCE: dict[tuple[int, int], NewerVersion] = {
    (52, 2): NewerVersion(
        why="KIP-996 pre-vote (Kafka 4.0): VoteRequest v2 adds PreVote (bool, untagged) to each "
            "partition, after LastOffset; VoteResponse v2 is v1 unchanged",
        added={"request": (Added("Topics.Partitions.PreVote", "bool", after="LastOffset"),),
               "response": ()}),
}


# Tagged fields of Seaway's own, (API key, "request"/"response") -> {dotted path: why}. Each
# must be tagged with a tag from PRIVATE_TAG_FLOOR, which Kafka's brokers skip as unknown and
# Kafka does not assign (its tags count up from 0), so the bytes stay Kafka's without them.
PRIVATE_TAG_FLOOR = 10000
SEAWAY_TAGGED: dict[tuple[int, str], dict[str, str]] = {
    (27, "request"): {
        "Markers.SeawayTransactionStartMs": "the transaction's start time, written into the marker's value "
                                            "(core/protocol/txn_markers.py)",
        "Markers.SeawayTransactionTopics": "how many partitions of each topic the transaction wrote, the same",
    },
}


# --------------------------------------------------------------------------- Kafka's JSON


def load_kafka_json(path: Path) -> dict:
    """Kafka's specs are JSON with whole-line `//` comments."""
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    return json.loads(text)


@dataclass(frozen=True)
class KRange:
    """A Kafka version range: "0+", "3-7", "4", or "none"."""
    low: int | None
    high: int | None

    @classmethod
    def parse(cls, text: str | None) -> "KRange":
        if text is None or text.strip() in ("", "none"):
            return cls(None, None)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, v: int) -> bool:
        return self.low is not None and v >= self.low and (self.high is None or v <= self.high)

    def covers(self, other: dsl.VersionRange) -> bool:
        if self.low is None or other.low < self.low:
            return False
        if self.high is None:
            return True
        return other.high is not None and other.high <= self.high


_KAFKA_INDEX: dict[tuple[str, int | None, str], dict] | None = None


def kafka_specs() -> dict:
    """(type, apiKey, name) -> parsed JSON, for every message, header, data struct and metadata
    record Kafka defines."""
    global _KAFKA_INDEX
    if _KAFKA_INDEX is None:
        index = {}
        for directory in (KAFKA_MESSAGES, KAFKA_METADATA_RECORDS):
            for path in sorted(directory.glob("*.json")):
                doc = load_kafka_json(path)
                index[(doc["type"], doc.get("apiKey"), doc["name"])] = doc
        _KAFKA_INDEX = index
    return _KAFKA_INDEX


def kafka_spec(kind: str, api_key: int | None, name: str) -> dict:
    """Requests and responses are found by API key, metadata records by record type (their
    names are compared by the caller), headers and data structs by name."""
    for (t, key, n), doc in kafka_specs().items():
        if t == kind and key == api_key and (kind not in ("header", "data") or n == name):
            return doc
    raise LookupError(f"Kafka defines no {kind} with key {api_key} / name {name}")


def normalize_default(type_: str, text):
    """A Kafka "default" as the Python value our parser produces."""
    if isinstance(text, bool):
        return text
    if isinstance(text, (int, float)):
        return text
    if text == "null":
        return None
    if type_ in dsl.INT_TYPES:
        return int(text, 0)
    if type_ == "bool":
        return {"true": True, "false": False}[text]
    if type_ == "float64":
        return float(text)
    return text


# --------------------------------------------------------------------------- comparison


@dataclass
class _FieldView:
    """One field as present at one version, from either side."""
    name: str
    elem: str          # element type name (primitive or struct name)
    is_array: bool
    nullable: bool
    tagged: bool
    tag: int | None
    has_default: bool
    default: object
    never_flexible: bool
    children: list | None   # list[_FieldView] for struct-typed fields


def _kafka_fields(fields: list[dict], version: int, flexible: bool, common: dict[str, list],
                  problems: list[str], where: str, prefix: str = "") -> list[_FieldView]:
    out = []
    for f in fields:
        name = f"{prefix}.{f['name']}" if prefix else f["name"]
        versions = KRange.parse(f.get("versions"))
        if version not in versions:
            continue
        type_text = f["type"]
        is_array = type_text.startswith("[]")
        elem = type_text[2:] if is_array else type_text
        tagged_versions = KRange.parse(f.get("taggedVersions"))
        if "taggedVersions" in f and tagged_versions != versions:
            problems.append(f"{where} {name}: Kafka's taggedVersions {f['taggedVersions']} differ "
                            f"from its versions {f['versions']}; our DSL cannot express that")
        children = None
        if elem not in dsl.PRIMITIVES:
            sub = f.get("fields")
            if sub is None:
                sub = common.get(elem)
                if sub is None:
                    raise LookupError(f"{where} {name}: Kafka type {elem} is neither inline nor common")
            children = _kafka_fields(sub, version, flexible, common, problems, where, name)
        has_default = "default" in f
        out.append(_FieldView(
            name=f["name"], elem=elem, is_array=is_array,
            nullable=version in KRange.parse(f.get("nullableVersions")),
            # Kafka spells some tags as strings ("tag": "0").
            tagged=flexible and version in tagged_versions,
            tag=int(f["tag"]) if "tag" in f else None,
            has_default=has_default,
            default=normalize_default(elem, f["default"]) if has_default else None,
            never_flexible=f.get("flexibleVersions", "").strip() == "none",
            children=children))
    return out


def _our_fields(struct: dsl.Struct, version: int, flexible: bool) -> list[_FieldView]:
    out = []
    for f in struct.fields:
        if version not in f.versions:
            continue
        out.append(_FieldView(
            name=f.name, elem=f.type, is_array=f.is_array, nullable=f.nullable_in(version),
            tagged=flexible and f.tag is not None, tag=f.tag, has_default=f.has_default,
            default=f.default, never_flexible=f.never_flexible,
            children=_our_fields(f.struct, version, flexible) if f.struct is not None else None))
    return out


def _type_text(v: _FieldView) -> str:
    return ("[]" if v.is_array else "") + v.elem


def _compare_fields(ours: list[_FieldView], theirs: list[_FieldView], where: str, prefix: str,
                    problems: list[str]) -> None:
    """`where` names the API, side and version; `prefix` the path of the enclosing struct."""
    at = f"{where} {prefix or '(top level)'}"
    our_plain = [f.name for f in ours if not f.tagged]
    their_plain = [f.name for f in theirs if not f.tagged]
    if our_plain != their_plain:
        missing = [n for n in their_plain if n not in our_plain]
        extra = [n for n in our_plain if n not in their_plain]
        detail = []
        if missing:
            detail.append(f"missing {missing}")
        if extra:
            detail.append(f"not in Kafka {extra}")
        if not missing and not extra:
            detail.append("order differs")
        problems.append(f"{at}: non-tagged fields {'; '.join(detail)}: ours {our_plain}, Kafka {their_plain}")
    our_tagged = {f.name for f in ours if f.tagged}
    their_tagged = {f.name for f in theirs if f.tagged}
    if our_tagged != their_tagged:
        problems.append(f"{at}: tagged fields differ: ours {sorted(our_tagged)}, Kafka {sorted(their_tagged)}")
    by_name = {f.name: f for f in theirs}
    for o in ours:
        t = by_name.get(o.name)
        if t is None:
            continue
        name = f"{prefix}.{o.name}" if prefix else o.name
        path = f"{where} {name}"
        if _type_text(o) != _type_text(t):
            problems.append(f"{path}: type ours {_type_text(o)}, Kafka {_type_text(t)}")
        if o.nullable != t.nullable:
            problems.append(f"{path}: nullable ours {o.nullable}, Kafka {t.nullable}")
        if o.tagged != t.tagged or (t.tagged and o.tag != t.tag):
            problems.append(f"{path}: tag ours {o.tag if o.tagged else 'untagged'}, "
                            f"Kafka {t.tag if t.tagged else 'untagged'}")
        if t.has_default and (not o.has_default or o.default != t.default
                              or type(o.default) is not type(t.default)):
            problems.append(f"{path}: default ours {o.default if o.has_default else '(none)'}, Kafka {t.default!r}")
        if o.has_default and not t.has_default:
            problems.append(f"{path}: default ours {o.default!r}, Kafka declares none")
        if o.never_flexible != t.never_flexible:
            problems.append(f"{path}: flexible=none ours {o.never_flexible}, Kafka {t.never_flexible}")
        if o.children is not None and t.children is not None:
            _compare_fields(o.children, t.children, where, name, problems)


def _take_private(ours: list[_FieldView], private: dict[str, str], where: str, problems: list[str]) -> None:
    """Check that each of Seaway's own fields (SEAWAY_TAGGED) is where the table says, tagged
    from PRIVATE_TAG_FLOOR, and remove it so that the rest can be compared with Kafka's."""
    for path in private:
        *parents, name = path.split(".")
        fields = ours
        for p in parents:
            parent = next((f for f in fields if f.name == p and f.children is not None), None)
            fields = parent.children if parent is not None else []
        field = next((f for f in fields if f.name == name), None)
        if field is None:
            continue        # a version without it
        if not field.tagged or field.tag is None or field.tag < PRIVATE_TAG_FLOOR:
            problems.append(f"{where} {path}: Seaway's own fields must be tagged from {PRIVATE_TAG_FLOOR}")
        fields.remove(field)


def _take_added(ours: list[_FieldView], add: Added, where: str, problems: list[str]) -> None:
    """Check that `add` is in `ours` as documented, and remove it so that the rest can be
    compared with the reference's newest version."""
    *parents, name = add.path.split(".")
    fields = ours
    for p in parents:
        parent = next((f for f in fields if f.name == p and f.children is not None), None)
        if parent is None:
            problems.append(f"{where} {add.path}: NEWER_THAN_REFERENCE adds it, but we have no struct {p}")
            return
        fields = parent.children
    field = next((f for f in fields if f.name == name), None)
    if field is None:
        problems.append(f"{where} {add.path}: NEWER_THAN_REFERENCE adds it, but our schema lacks it")
        return
    if _type_text(field) != add.type or field.tagged or field.nullable or field.has_default:
        problems.append(f"{where} {add.path}: NEWER_THAN_REFERENCE adds an untagged, non-nullable "
                        f"{add.type} without default; ours is {_type_text(field)}"
                        f"{' tagged' if field.tagged else ''}{' nullable' if field.nullable else ''}"
                        f"{f' default={field.default!r}' if field.has_default else ''}")
    plain = [f.name for f in fields if not f.tagged]
    expected = 0 if add.after is None else (plain.index(add.after) + 1 if add.after in plain else -1)
    if not field.tagged and plain.index(name) != expected:
        problems.append(f"{where} {add.path}: NEWER_THAN_REFERENCE puts it after {add.after}; "
                        f"ours is at position {plain.index(name)} of {plain}")
    fields.remove(field)


def compare_message(spec: dsl.MessageSpec, kafka: dict, label: str,
                    versions: list[int] | None = None,
                    newer: dict[int, tuple[Added, ...]] | None = None,
                    private: dict[str, str] | None = None) -> list[str]:
    """Every way `spec` disagrees with Kafka's JSON `kafka`, as readable lines. `newer` maps
    versions beyond Kafka's validVersions that we declare on purpose to the fields each adds
    (from NEWER_THAN_REFERENCE)."""
    problems: list[str] = []
    newer = newer or {}
    valid = KRange.parse(kafka["validVersions"])
    allowed = valid
    if valid.high is not None:
        high = valid.high
        while high + 1 in newer:
            high += 1
        allowed = KRange(valid.low, high)
    if not allowed.covers(spec.versions):
        extra = f" (and v{valid.high + 1}-{allowed.high} from NEWER_THAN_REFERENCE)" if allowed != valid else ""
        problems.append(f"{label}: we advertise {spec.versions}, Kafka's validVersions are "
                        f"{kafka['validVersions']}{extra}")
    kflex = KRange.parse(kafka.get("flexibleVersions"))
    common = {c["name"]: c["fields"] for c in kafka.get("commonStructs", [])}
    if spec.versions.high is None:
        problems.append(f"{label}: we advertise the open range {spec.versions}; advertise a closed one")
    if versions is None:
        hi = spec.versions.high if spec.versions.high is not None else (valid.high or spec.versions.low)
        versions = list(range(spec.versions.low, hi + 1))
    for v in versions:
        where = f"{label} v{v}"
        flexible = spec.is_flexible(v)
        if flexible != (v in kflex):
            problems.append(f"{where}: flexible ours {flexible}, Kafka {v in kflex} "
                            f"(flexibleVersions {kafka.get('flexibleVersions')})")
        ours = _our_fields(spec.root, v, flexible)
        _take_private(ours, private or {}, where, problems)
        reference = v
        if valid.high is not None and valid.high < v <= allowed.high:
            # Newer than the reference: the reference's newest version plus what the table adds.
            reference = valid.high
            for newer_v in range(valid.high + 1, v + 1):
                for add in newer[newer_v]:
                    _take_added(ours, add, where, problems)
        theirs = _kafka_fields(kafka["fields"], reference, reference in kflex, common, problems, where)
        _compare_fields(ours, theirs, where, "", problems)
    return problems


def newer_than_reference(api_key: int, kind: str) -> dict[int, tuple[Added, ...]]:
    return {v: entry.added[kind] for (key, v), entry in NEWER_THAN_REFERENCE.items() if key == api_key}


def compare_api(api: dsl.ApiSchema, versions: list[int] | None = None) -> list[str]:
    problems = []
    for spec in (api.request, api.response):
        kafka = kafka_spec(spec.kind, api.key, spec.name)
        label = f"{api.name} {spec.kind}"
        if kafka["name"] != spec.name:
            problems.append(f"{label}: Kafka calls API key {api.key}'s {spec.kind} {kafka['name']}, we {spec.name}")
        problems += compare_message(spec, kafka, label, versions, newer_than_reference(api.key, spec.kind),
                                    SEAWAY_TAGGED.get((api.key, spec.kind)))
    return problems


def compare_record(spec: dsl.MessageSpec) -> list[str]:
    """A metadata record against Kafka's, in every version Kafka defines: a log written by
    Kafka may hold any of them, so we must read them all."""
    assert spec.kind == "record"
    try:
        kafka = kafka_spec("metadata", spec.api_key, spec.name)
    except LookupError:
        return [f"{spec.name}: Kafka defines no metadata record of type {spec.api_key}"]
    problems = []
    if kafka["name"] != spec.name:
        problems.append(f"{spec.name}: Kafka's metadata record type {spec.api_key} is {kafka['name']}, "
                        f"ours {spec.name}")
    if KRange.parse(kafka["validVersions"]) != KRange(spec.versions.low, spec.versions.high):
        problems.append(f"{spec.name}: we declare versions {spec.versions}, Kafka's validVersions are "
                        f"{kafka['validVersions']}; declare them all")
    return problems + compare_message(spec, kafka, spec.name)


def compare_data(spec: dsl.MessageSpec, all_versions: bool = False) -> list[str]:
    kafka = kafka_spec("data", None, spec.name)
    problems = []
    if all_versions and KRange.parse(kafka["validVersions"]) != KRange(spec.versions.low, spec.versions.high):
        problems.append(f"{spec.name}: we declare versions {spec.versions}, Kafka's validVersions are "
                        f"{kafka['validVersions']}; declare them all")
    return problems + compare_message(spec, kafka, spec.name)


# --------------------------------------------------------------------------- tests

needs_kafka = pytest.mark.skipif(not KAFKA_MESSAGES.is_dir(),
                                 reason=f"Kafka's message specs are not at {KAFKA_MESSAGES}")


def _api_versions():
    for key, api in sorted(messages.API.items()):
        for v in range(api.min_version, api.max_version + 1):
            yield pytest.param(key, v, id=f"{api.name}-v{v}")


@needs_kafka
@pytest.mark.parametrize("key,version", list(_api_versions()))
def test_api_matches_kafka(key, version):
    problems = compare_api(messages.API[key].schema, [version])
    assert not problems, "\n".join(problems)


@needs_kafka
@pytest.mark.parametrize("name", ["RequestHeader", "ResponseHeader"])
def test_header_matches_kafka(name):
    _, headers = dsl.load_all()
    spec = headers[name]
    problems = compare_message(spec, kafka_spec("header", None, name), name)
    assert not problems, "\n".join(problems)


@needs_kafka
@pytest.mark.parametrize("name", ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "DefaultPrincipalData"])
def test_consumer_protocol_matches_kafka(name):
    _, structs = dsl.load_all()
    spec = structs[name]
    assert spec.kind == "data"
    problems = compare_data(spec)
    assert not problems, "\n".join(problems)


# KRaft's control records: the value of each record in a control batch of __cluster_metadata.
KRAFT_CONTROL_STRUCTS = ["LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
                         "KRaftVersionRecord", "VotersRecord"]


@needs_kafka
@pytest.mark.parametrize("name", KRAFT_CONTROL_STRUCTS)
def test_kraft_control_records_match_kafka(name):
    spec = messages.DATA[name].spec
    assert spec.kind == "data"
    problems = compare_data(spec, all_versions=True)
    assert not problems, "\n".join(problems)


@needs_kafka
@pytest.mark.parametrize("record_type", sorted(messages.METADATA_RECORDS),
                         ids=[c.spec.name for _, c in sorted(messages.METADATA_RECORDS.items())])
def test_metadata_record_matches_kafka(record_type):
    spec = messages.METADATA_RECORDS[record_type].spec
    assert spec.api_key == record_type
    problems = compare_record(spec)
    assert not problems, "\n".join(problems)


@needs_kafka
def test_every_kafka_metadata_record_is_declared():
    theirs = {key: name for (t, key, name) in kafka_specs() if t == "metadata"}
    assert theirs, f"no metadata records found in {KAFKA_METADATA_RECORDS}"
    ours = {key: codec.spec.name for key, codec in messages.METADATA_RECORDS.items()}
    assert ours == theirs


@needs_kafka
def test_every_api_has_a_kafka_spec():
    for key, api in messages.API.items():
        assert api.schema.request.name == api.name + "Request"
        assert api.schema.response.name == api.name + "Response"
        kafka_spec("request", key, api.schema.request.name)
        kafka_spec("response", key, api.schema.response.name)


@needs_kafka
def test_newer_than_reference_entries_are_needed_and_declared():
    """Each entry names a version the reference lacks and that we declare; once the reference
    catches up, the entry must go and the version is checked like any other."""
    for (key, version), entry in NEWER_THAN_REFERENCE.items():
        assert entry.why
        api = messages.API[key]
        assert api.supports(version), f"{api.name} v{version} is in NEWER_THAN_REFERENCE but not declared"
        for kind in ("request", "response"):
            valid = KRange.parse(kafka_spec(kind, key, "")["validVersions"])
            assert version not in valid, (f"Kafka's reference now defines {api.name} {kind} v{version}; "
                                          "drop it from NEWER_THAN_REFERENCE")


def test_schema_only_apis_are_not_advertised():
    """Declaring an API's schema does not advertise it: ApiVersions lists only the APIs the
    broker has a handler for (the KRaft RPCs are declared before anything serves them)."""
    from core.broker.handlers import HANDLERS
    from core.broker.handlers.api_versions import api_versions_response
    from core.protocol.errors import ErrorCode
    advertised = {k.api_key for k in api_versions_response(ErrorCode.NONE, HANDLERS).api_keys}
    assert advertised == set(HANDLERS) & set(messages.API)
    kraft = {52, 53, 54, 55, 58, 59, 62, 63, 64, 70, 80, 81, 82}
    assert kraft <= set(messages.API)
    assert advertised & kraft == set(HANDLERS) & kraft


# ---- the comparison itself must catch mistakes

def _problems_for(text: str) -> str:
    parsed = dsl.parse_schema(text, "<mutated>")
    if isinstance(parsed, dsl.ApiSchema):
        return "\n".join(compare_api(parsed))
    if parsed.kind == "record":
        return "\n".join(compare_record(parsed))
    return "\n".join(compare_data(parsed, all_versions=True))


PRODUCE_KS = (dsl.SCHEMA_DIR / "produce.ks").read_text()
METADATA_KS = (dsl.SCHEMA_DIR / "metadata.ks").read_text()
FETCH_KS = (dsl.SCHEMA_DIR / "fetch.ks").read_text()
VOTE_KS = (dsl.SCHEMA_DIR / "vote.ks").read_text()
PARTITION_RECORD_KS = (dsl.SCHEMA_DIR / "metadata" / "partition_record.ks").read_text()
PARTITION_CHANGE_KS = (dsl.SCHEMA_DIR / "metadata" / "partition_change_record.ks").read_text()
REGISTER_BROKER_KS = (dsl.SCHEMA_DIR / "metadata" / "register_broker_record.ks").read_text()
BROKER_CHANGE_KS = (dsl.SCHEMA_DIR / "metadata" / "broker_registration_change_record.ks").read_text()
TOPIC_RECORD_KS = (dsl.SCHEMA_DIR / "metadata" / "topic_record.ks").read_text()
VOTERS_RECORD_KS = (dsl.SCHEMA_DIR / "metadata" / "voters_record.ks").read_text()


@needs_kafka
def test_unmutated_copies_compare_clean():
    for text in (PRODUCE_KS, METADATA_KS, FETCH_KS, VOTE_KS, PARTITION_RECORD_KS, PARTITION_CHANGE_KS,
                 REGISTER_BROKER_KS, BROKER_CHANGE_KS, TOPIC_RECORD_KS, VOTERS_RECORD_KS):
        assert _problems_for(text) == ""


def _field_lines(text: str):
    """(line index, section, dotted field path, indent, tokens) for each field line of a .ks text."""
    out, section, stack = [], None, []
    for i, raw in enumerate(text.splitlines()):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        tokens = line.split()
        if indent == 0:
            if tokens[0] in ("request", "response", "header", "data", "record"):
                section, stack = tokens[0], []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, tokens[0]))
        out.append((i, section, ".".join(name for _, name in stack), indent, tokens))
    return out


SWAP_WITH_NEXT = object()


def mutate(text: str, where: str, change) -> str:
    """Apply `change` (tokens -> tokens, or SWAP_WITH_NEXT) to one line of a .ks text, found by
    "SECTION Dotted.Field.Path" or by a head keyword ("versions", "flexible"), whatever the
    spacing of the file."""
    lines = text.splitlines()
    if " " not in where:
        hits = [(i, 0, line.split()) for i, line in enumerate(lines) if line.split()[:1] == [where]]
    else:
        section, path = where.split(" ", 1)
        hits = [(i, ind, toks) for i, sec, p, ind, toks in _field_lines(text) if (sec, p) == (section, path)]
    assert len(hits) == 1, f"{where!r} must name exactly one line, found {len(hits)}"
    i, indent, tokens = hits[0]
    if change is SWAP_WITH_NEXT:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    else:
        lines[i] = " " * indent + " ".join(change(tokens))
    return "\n".join(lines) + "\n"


def swap_token(old: str, new: str | None):
    def change(tokens):
        assert old in tokens, f"{old!r} not in {tokens}"
        return [t for t in (new if t == old else t for t in tokens) if t is not None]
    return change


MUTATIONS = [
    # (file text, where, change, words the report must contain)
    (PRODUCE_KS, "response Responses.PartitionResponses.LogStartOffset", swap_token("v5+", "v6+"),
     ["Produce response v5 Responses.PartitionResponses: non-tagged fields missing ['LogStartOffset']"]),
    (PRODUCE_KS, "response Responses.PartitionResponses.BaseOffset", swap_token("int64", "int32"),
     ["Produce response v3 Responses.PartitionResponses.BaseOffset: type ours int32, Kafka int64"]),
    (PRODUCE_KS, "request TopicData.PartitionData.Index", SWAP_WITH_NEXT,
     ["Produce request v3 TopicData.PartitionData: non-tagged fields order differs"]),
    (PRODUCE_KS, "request TopicData.PartitionData.Records", swap_token("nullable", None),
     ["Produce request v3 TopicData.PartitionData.Records: nullable ours False, Kafka True"]),
    (PRODUCE_KS, "response NodeEndpoints", swap_token("tag=0", "tag=1"),
     ["Produce response v10 NodeEndpoints: tag ours 1, Kafka 0"]),
    (PRODUCE_KS, "response NodeEndpoints", swap_token("tag=0", None),
     ["Produce response v10 (top level): tagged fields differ", "non-tagged fields not in Kafka ['NodeEndpoints']"]),
    (PRODUCE_KS, "response Responses.PartitionResponses.LogAppendTimeMs", swap_token("default=-1", "default=0"),
     ["Produce response v3 Responses.PartitionResponses.LogAppendTimeMs: default ours 0, Kafka -1"]),
    (PRODUCE_KS, "response ThrottleTimeMs", swap_token("default=0", None),
     ["Produce response v3 ThrottleTimeMs: default ours (none), Kafka 0"]),
    (PRODUCE_KS, "flexible", swap_token("9+", "10+"), ["Produce request v9: flexible ours False, Kafka True"]),
    (PRODUCE_KS, "versions", swap_token("3-11", "3-12"), ["we advertise 3-12, Kafka's validVersions are 0-11"]),
    (PRODUCE_KS, "request TopicData.PartitionData", swap_token("[]PartitionProduceData", "[]PartitionData"),
     ["Produce request v3 TopicData.PartitionData: type ours []PartitionData, Kafka []PartitionProduceData"]),
    (METADATA_KS, "request Topics", swap_token("nullable=1+", "nullable"),
     ["Metadata request v0 Topics: nullable ours True, Kafka False"]),
    (METADATA_KS, "response Topics.TopicId", swap_token("v10+", "v9+"),
     ["Metadata response v9 Topics: non-tagged fields not in Kafka ['TopicId']"]),
    (FETCH_KS, "request Topics.Partitions.ReplicaDirectoryId", swap_token("v17+", "v16+"),
     ["Fetch request v16 Topics.Partitions: tagged fields differ"]),
    (FETCH_KS, "response Responses.Partitions.DivergingEpoch.Epoch", swap_token("int32", "int64"),
     ["Fetch response v12 Responses.Partitions.DivergingEpoch.Epoch: type ours int64, Kafka int32"]),
    # Vote v2 is newer than the reference: only NEWER_THAN_REFERENCE's PreVote may differ.
    (VOTE_KS, "versions", swap_token("0-2", "0-3"),
     ["Vote request: we advertise 0-3, Kafka's validVersions are 0-1 (and v2-2 from NEWER_THAN_REFERENCE)"]),
    (VOTE_KS, "request Topics.Partitions.PreVote", swap_token("v2+", "v1+"),
     ["Vote request v1 Topics.Partitions: non-tagged fields not in Kafka ['PreVote']"]),
    (VOTE_KS, "request Topics.Partitions.PreVote", swap_token("v2+", "v3+"),
     ["Vote request v2 Topics.Partitions.PreVote: NEWER_THAN_REFERENCE adds it, but our schema lacks it"]),
    (VOTE_KS, "request Topics.Partitions.PreVote", swap_token("bool", "int8"),
     ["Vote request v2 Topics.Partitions.PreVote: NEWER_THAN_REFERENCE adds an untagged, non-nullable bool"]),
    (VOTE_KS, "request Topics.Partitions.LastOffset", SWAP_WITH_NEXT,
     ["Vote request v2 Topics.Partitions.PreVote: NEWER_THAN_REFERENCE puts it after LastOffset"]),
    (VOTE_KS, "request Topics.Partitions.LastOffsetEpoch", swap_token("int32", "int64"),
     ["Vote request v2 Topics.Partitions.LastOffsetEpoch: type ours int64, Kafka int32"]),
    (VOTE_KS, "response NodeEndpoints.Port", swap_token("uint16", "int32"),
     ["Vote response v2 NodeEndpoints.Port: type ours int32, Kafka uint16"]),
    # Metadata records, checked in every version Kafka defines.
    (PARTITION_CHANGE_KS, "record Leader", swap_token("default=-2", "default=-1"),
     ["PartitionChangeRecord v0 Leader: default ours -1, Kafka -2"]),
    (PARTITION_CHANGE_KS, "record Directories", swap_token("tag=8", "tag=6"),
     ["PartitionChangeRecord v1 Directories: tag ours 6, Kafka 8"]),
    (PARTITION_CHANGE_KS, "record Isr", swap_token("nullable", None),
     ["PartitionChangeRecord v0 Isr: nullable ours False, Kafka True"]),
    (PARTITION_RECORD_KS, "record Directories", swap_token("v1+", "v2+"),
     ["PartitionRecord v1 (top level): non-tagged fields missing ['Directories']"]),
    (PARTITION_RECORD_KS, "record LeaderEpoch", SWAP_WITH_NEXT,
     ["PartitionRecord v0 (top level): non-tagged fields order differs"]),
    (REGISTER_BROKER_KS, "versions", swap_token("0-3", "0-2"),
     ["RegisterBrokerRecord: we declare versions 0-2, Kafka's validVersions are 0-3; declare them all"]),
    (REGISTER_BROKER_KS, "record EndPoints.Port", swap_token("uint16", "int32"),
     ["RegisterBrokerRecord v0 EndPoints.Port: type ours int32, Kafka uint16"]),
    (BROKER_CHANGE_KS, "record Fenced", swap_token("tag=0", None),
     ["BrokerRegistrationChangeRecord v0 (top level): tagged fields differ",
      "non-tagged fields not in Kafka ['Fenced']"]),
    (BROKER_CHANGE_KS, "flexible", swap_token("0+", "1+"),
     ["BrokerRegistrationChangeRecord v0: flexible ours False, Kafka True"]),
    (TOPIC_RECORD_KS, "record", swap_token("2", "3"),
     ["TopicRecord: Kafka's metadata record type 3 is PartitionRecord, ours TopicRecord"]),
    (TOPIC_RECORD_KS, "record", swap_token("2", "6"),
     ["TopicRecord: Kafka defines no metadata record of type 6"]),
    # KRaft control record structs.
    (VOTERS_RECORD_KS, "data Voters.Endpoints.Port", swap_token("uint16", "int32"),
     ["VotersRecord v0 Voters.Endpoints.Port: type ours int32, Kafka uint16"]),
]


@needs_kafka
@pytest.mark.parametrize("text,where,change,expect", MUTATIONS, ids=[f"mut{i}" for i in range(len(MUTATIONS))])
def test_comparison_catches_mutations(text, where, change, expect):
    report = _problems_for(mutate(text, where, change))
    assert report, "a deliberately wrong schema compared clean"
    for words in expect:
        assert words in report, f"expected {words!r} in:\n{report}"
