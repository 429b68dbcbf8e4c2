"""The test tree's layout: shared helpers live in tests/support (or in a directory's own helper
modules, such as tests/raft/simulation.py), never in a test module. A test module that imports
another one runs that module's code twice (pytest's copy and the import's) and ties two suites
together by accident; one that loads a sibling by its path does the same, less visibly.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LOADERS = ("spec_from_file_location", "SourceFileLoader", "import_module")
TEST_MODULE_NAME = re.compile(r"^(?:[\w./-]*[./])?test_\w+(?:\.py)?$")


def _names_a_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imports_of_test_modules(path: Path) -> list[str]:
    """What `path` imports from test modules, as 'line N: statement'."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if _names_a_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            bad = [module] if _names_a_test_module(module) else \
                [a.name for a in node.names if a.name.startswith("test_")]
        else:
            continue
        if bad:
            found.append(f"line {node.lineno}: {ast.get_source_segment(source, node)}")
    # A sibling loaded by its path or name: a loader, and a test module's name in a string.
    if any(loader in source for loader in LOADERS):
        names = sorted({n.value for n in ast.walk(ast.parse(source))
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and TEST_MODULE_NAME.match(n.value)})
        if names:
            found.append(f"loads {', '.join(names)}")
    return found


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts)


def test_no_test_module_imports_another():
    offenders = {str(path.relative_to(TESTS.parent)): found for path in python_files()
                 if path != Path(__file__).resolve() and (found := imports_of_test_modules(path))}
    assert not offenders, (
        "move the shared helpers to tests/support and import them from there:\n" +
        "\n".join(f"  {path}: {'; '.join(found)}" for path, found in sorted(offenders.items())))


def test_the_check_sees_each_way_of_importing_a_test_module(tmp_path):
    cases = {
        "from tests.unit.test_log import batch": True,
        "from .test_log import batch": True,
        "from tests.unit import test_controller_harness as harness": True,
        "import tests.integration.test_mirror": True,
        "import test_codec_roundtrip": True,
        "spec = importlib.util.spec_from_file_location('x', here / 'test_codec_fuzz.py')": True,
        "import importlib.util\n"
        "def load(name):\n"
        "    return importlib.util.spec_from_file_location(name, here.with_name(f'{name}.py'))\n"
        "roundtrip = load('test_codec_roundtrip')": True,
        "module = importlib.import_module('tests.unit.test_log')": True,
        "from tests.support.wire import call": False,
        "from tests.raft.simulation import Simulation": False,
        "from core.protocol.records import build_batch": False,
    }
    for statement, caught in cases.items():
        module = tmp_path / "test_case.py"
        module.write_text(statement + "\n")
        assert bool(imports_of_test_modules(module)) is caught, statement
