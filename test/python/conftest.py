"""The module's tests run against the build folder's package (PYTHONPATH, set by
test/python/meson.build); each test that takes `gate_type` or `pool_type` runs on the lock-free
primitive and on its mutex twin."""
import pytest

import sluice


@pytest.fixture(params=[sluice.Gate, sluice.MutexGate], ids=["Gate", "MutexGate"])
def gate_type(request):
    return request.param


@pytest.fixture(params=[sluice.Pool, sluice.MutexPool], ids=["Pool", "MutexPool"])
def pool_type(request):
    return request.param
