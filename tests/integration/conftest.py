"""conftest.py: pytest fixtures for the integration tests (processes are killed at teardown)."""
import os

import pytest

import harness


def _bin(name):
    path = os.environ.get(name)
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def bins():
    """Paths of the binaries under test (MTPROXY_BIN may be missing: proxy tests skip)."""
    b = {"mtproxy": _bin("MTPROXY_BIN"), "fake_dc": _bin("FAKE_DC_BIN"),
         "test_client": _bin("TEST_CLIENT_BIN")}
    for k in ("fake_dc", "test_client"):
        if not b[k]:
            pytest.skip(f"{k.upper()}_BIN not set or not executable")
    return b


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _test_failed(request):
    node = request.node
    return any(getattr(node, "rep_" + w, None) is not None and getattr(node, "rep_" + w).failed
               for w in ("setup", "call"))


@pytest.fixture
def procs(bins, tmp_path, request):
    ps = harness.Procs(bins, str(tmp_path))
    yield ps
    problems = ps.teardown(_test_failed(request))
    if problems:
        pytest.fail("at teardown:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture
def std(procs):
    return harness.Std(procs)
