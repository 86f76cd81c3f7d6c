"""Dask partitions far from zero, and empty partitions (issue 28; docs/scaling.md).

A model over a dask array is centred like one in memory (graph/centring.py computes the
data's c on the cluster when the model is built; the partitions inherit it with the
pickled families): with the prior moved with the data the Dask fit equals the in-memory
fit to 1e-10 at offsets up to 1e8; with the prior left at 0 (its beta m0^2 terms then
dominate the ELBO) no partition raises and the two agree to the ELBO's rounding. An
empty chunk is no task: the fit equals the in-memory fit.
"""
from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import blrgraph as bg  # noqa: E402
from blrgraph.inference.tolerance import EPS, elbo_magnitude  # noqa: E402
from test_dask import gmm_data  # noqa: E402

REL = 1e-10


DASK_WORKERS = 1   # the shared client fixture (tests/conftest.py)


def _gmm(data, m0, K=3):
    N, D = data.shape
    pi = bg.Dirichlet(np.full(K, 0.5), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    theta = bg.NormalWishart(m0, 0.01, D + 1.0, np.eye(D), plates=(K,), name="theta")
    return bg.Model(bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(data))


def _both(X, R, m0, chunks=(100, 3), iters=20):
    mem, dsk = _gmm(X, m0), _gmm(da.from_array(X, chunks=chunks), m0)
    fm = mem.fit("vmp", init=R, max_iter=iters)
    fd = dsk.fit("vmp", init=R, max_iter=iters)
    return mem, dsk, fm, fd


@pytest.mark.parametrize("offset", [1e6, -1e8])
def test_dask_partitions_far_from_zero_equal_the_fit_in_memory(client, offset):
    X, R = gmm_data(300)
    mem, dsk, fm, fd = _both(X + offset, R, np.full(3, offset))
    np.testing.assert_allclose(dsk["theta"].family.shift, mem["theta"].family.shift, rtol=1e-14)
    np.testing.assert_allclose(fd.elbo_trace, fm.elbo_trace, rtol=REL)
    m, d = mem["theta"].posterior.params, dsk["theta"].posterior.params
    np.testing.assert_allclose(d["mean"] - offset, m["mean"] - offset, rtol=0, atol=1e-9)
    np.testing.assert_allclose(d["scale"], m["scale"], rtol=REL)


@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_a_prior_far_from_dask_data_raises_nothing_and_agrees_to_rounding(client, offset):
    """(Before: at 1e8 a partition raised 'outside the natural parameter space', at 1e6
    the ELBO differed from the in-memory fit by 1.2e-3 relative: the partitions were
    centred on the prior's mean, not on the data.)"""
    X, R = gmm_data(300)
    mem, dsk, fm, fd = _both(X + offset, R, np.zeros(3))
    np.testing.assert_allclose(dsk["theta"].family.shift, mem["theta"].family.shift, rtol=1e-14)
    tol = 4 * EPS * elbo_magnitude(mem)     # the prior's beta m0^2 / 2 ~ 1e14 per component
    assert np.max(np.abs(np.asarray(fd.elbo_trace) - fm.elbo_trace)) <= tol


def test_an_empty_partition_is_no_task(client):
    X, R = gmm_data(300)
    mem, dsk, fm, fd = _both(X, R, np.zeros(3), chunks=((100, 0, 200), (3,)))
    np.testing.assert_allclose(fd.elbo_trace, fm.elbo_trace, rtol=REL)
