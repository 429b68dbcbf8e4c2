"""The typed protocol surface generated from the schema (core/protocol/stubgen.py): the ApiKey
enum (core/protocol/api_keys.py) and the message stubs (core/protocol/messages.pyi) are checked
in; they must be exactly what the generator writes from the schema today."""
from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from core.protocol import messages, stubgen
from core.protocol.api_keys import ApiKey

REPO = Path(__file__).resolve().parents[2]
KAFKA_MESSAGES = REPO.parent / "shared" / "kafka-protocol" / "messages"


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    return stubgen.generate()


def test_generated_files_are_current(generated):
    for path, text in generated.items():
        assert path.exists(), f"{path.name} is missing: run `{stubgen.REGENERATE}` and commit it"
        assert path.read_text() == text, (
            f"{path.relative_to(REPO)} is out of date with core/protocol/schema: "
            f"run `{stubgen.REGENERATE}` and commit the result")


def test_api_key_has_a_member_per_schema_api():
    assert {k.value: k.name for k in ApiKey} == {
        key: stubgen.api_key_name(api.name) for key, api in messages.API.items()}
    assert messages.ApiKey is ApiKey  # re-exported: modules that import messages as m use m.ApiKey
    assert ApiKey.PRODUCE == 0 and ApiKey.API_VERSIONS == 18 and ApiKey.VOTE == 52
    assert ApiKey.BROKER_REGISTRATION == 62 and ApiKey.ALTER_PARTITION == 56
    # Members stand in for the numbers everywhere: equal, same hash, same wire bytes.
    assert {19: "x"}[ApiKey.CREATE_TOPICS] == "x" and f"{ApiKey.FETCH}" == "1"


@pytest.mark.skipif(not KAFKA_MESSAGES.is_dir(), reason="Kafka's reference specs are absent")
def test_api_key_names_are_kafkas():
    """Kafka's ApiKeys constants are the request names in UPPER_SNAKE."""
    kafka = {}
    for path in KAFKA_MESSAGES.glob("*Request.json"):
        doc = json.loads("\n".join(line for line in path.read_text().splitlines()
                                   if not line.lstrip().startswith("//")))
        if doc.get("type") == "request":
            kafka[doc["apiKey"]] = stubgen.api_key_name(doc["name"].removesuffix("Request"))
    assert {k.value: k.name for k in ApiKey} == {k.value: kafka[k.value] for k in ApiKey}


def _stub_tree() -> ast.Module:
    return ast.parse(stubgen.STUBS_PATH.read_text())


def _declared(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def test_stubs_declare_what_the_module_defines():
    """The hand-written part of the stubs (Api and the registries) follows messages.py, and
    every generated class matches its runtime class, nested classes and fields included."""
    imported = {alias.asname or alias.name
                for node in ast.parse(Path(messages.__file__).read_text()).body
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    runtime = {name for name in vars(messages) if not name.startswith("_")} - imported
    stub = _declared(_stub_tree().body)
    assert set(stub) - {"_Buffer", "_Records"} == runtime

    api_stub = _declared(stub["Api"].body)
    assert list(api_stub) == list(messages.Api.__dataclass_fields__)
    methods = {n.name for n in stub["Api"].body if isinstance(n, ast.FunctionDef)} - {"__init__"}
    assert methods == {n for n, v in vars(messages.Api).items()
                       if inspect.isfunction(v) and not n.startswith("_")}

    for name, node in stub.items():
        if not isinstance(node, ast.ClassDef) or name == "Api":
            continue
        cls = getattr(messages, name)
        nested = {n.name: n for n in node.body if isinstance(n, ast.ClassDef)}
        assert set(nested) == {k for k, v in vars(cls).items() if isinstance(v, type)}, name
        for sub_name, sub in [(name, node), *nested.items()]:
            sub_cls = cls if sub_name == name else getattr(cls, sub_name)
            fields = [n.target.id for n in sub.body if isinstance(n, ast.AnnAssign)]
            assert fields == [*sub_cls._fields, "unknown_tags"], f"{name}.{sub_name}"


def test_check_mode_reports_stale_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(stubgen, "API_KEYS_PATH", tmp_path / "api_keys.py")
    monkeypatch.setattr(stubgen, "STUBS_PATH", tmp_path / "messages.pyi")
    assert stubgen.main(["--check"]) == 1
    assert stubgen.REGENERATE in capsys.readouterr().err
    assert stubgen.main([]) == 0
    assert stubgen.main(["--check"]) == 0
