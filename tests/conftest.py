"""Fixtures shared by several test files."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client(request):
    """A Dask client on a LocalCluster of worker processes, one per test module; the module's
    ``DASK_WORKERS`` (default 2) sets the number of workers. The module imports dask and
    distributed with ``pytest.importorskip`` (the ``dask`` extra)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=getattr(request.module, "DASK_WORKERS", 2),
                                       threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()
