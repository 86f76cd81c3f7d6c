"""A family, a factor, a method and a view added through the extension points of
docs/dev/architecture.md ("Adding a family, a factor, a method or a view") and nothing else.

Everything new lives in this file, in the shape the list asks for: a family (an
``ExponentialFamily`` subclass, as in ``families/<name>.py``), a factor (a ``Conditional``
subclass, as in ``graph/factors/<kind>.py``), its public node (a ``_spec``, as in
``graph/nodes.py``), a method (a ``Method`` object) and a view of the data (a ``DataView``
subclass that holds the rows in chunks and reports their messages, with the rows source
that hands it to the loop, as ``plan_run`` would pick it). No engine file knows their
names, and the engine fits them exactly: the Geometric-Beta posterior and evidence in
closed form, and the chunked view's GMM fit is the in-memory one.
"""
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.special import betaln, digamma

import blrgraph as bg
from blrgraph.families.base import ExponentialFamily
from blrgraph.families.beta import Beta as BetaFamily
from blrgraph.graph.factors.base import Conditional, Slot
from blrgraph.graph.nodes import _Public
from blrgraph.graph.plates import wsum
from blrgraph.inference.batches import Rows
from blrgraph.inference.blr import message_from
from blrgraph.inference.fit import _start, plan_run
from blrgraph.inference.loop import Run
from blrgraph.inference.methods import get_method
from blrgraph.inference.options import parse_options
from blrgraph.inference.structure import Structure
from blrgraph.inference.views import DataView, RowView
from helpers_models import gmm_model


class GeometricFamily(ExponentialFamily):
    """Geometric(p): failures before the first success, x = 0, 1, 2, ...

    p(x | p) = (1 - p)^x p:  T(x) = (x,), lam = (log(1 - p),), h = 1,
    A(lam) = -log(1 - e^lam) = -log p,  mu = ((1 - p) / p,)."""

    name = "Geometric"
    param_names = ("p",)
    event_ndims = (0,)
    value_ndim = 0

    def validate_params(self, p, where=None):
        p = np.asarray(p, dtype=float)
        if np.any((p <= 0) | (p >= 1)):
            raise ValueError(f"{where or self.name}: p must lie in (0, 1)")
        return (p,)

    def natural_from_params(self, p):
        return (np.log1p(-np.asarray(p, dtype=float)),)

    def _p(self, nat):
        return -np.expm1(np.asarray(nat[0], dtype=float))

    def params_from_natural(self, nat):
        return {"p": self._p(nat)}

    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_base_measure(self, x):
        return np.zeros(np.shape(x))

    def log_partition(self, nat):
        return -np.log(self._p(nat))

    def mean_params(self, nat):
        p = self._p(nat)
        return ((1.0 - p) / p,)

    def entropy(self, nat):
        return self.log_partition(nat) - nat[0] * self.mean_params(nat)[0]

    def mean(self, nat):
        return self.mean_params(nat)[0]

    def var(self, nat):
        p = self._p(nat)
        return (1.0 - p) / p ** 2

    def mode(self, nat):
        return np.zeros(np.shape(nat[0]))

    def sample(self, nat, rng=None, size=None):
        return np.random.default_rng(rng).geometric(self._p(nat), size=size) - 1

    def to_scipy(self, nat):
        return stats.geom(self._p(nat), loc=-1)

    # value facts
    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return (x < 0) | (x != np.round(x)), "non-negative integers (failures before a success)"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)


class GeometricFactor(Conditional):
    """x ~ Geometric(p), p a Beta node (moments E log p, E log(1-p)):
    E[log p(x | p)] = x E log(1-p) + E log p; message to p: (sum w, sum w x)."""

    def prior_natural(self, u):
        (lp, l1p), = u
        return (l1p,)

    def expected_log_partition(self, u):
        (lp, _), = u
        return -lp

    def message(self, i, x, u, w, target):
        x1, = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, np.ones_like(x1), **kw), wsum(w, x1, **kw))


class Geometric(_Public):
    """Geometric(p): p a probability or a Beta node."""

    @classmethod
    def _spec(cls, p, name=None):
        return (GeometricFamily(), GeometricFactor, [p], [Slot("p", BetaFamily(), kind="unit")], {})


def _data(n=200, p=0.3, seed=0):
    return np.random.default_rng(seed).geometric(p, size=n) - 1.0


def test_a_new_family_and_factor_fit_exactly():
    a, b = 2.0, 3.0
    x = _data()
    p = bg.Beta(a, b, name="p")
    y = Geometric(p, plates=(len(x),), name="y").observe(x)
    fit = bg.Model(y).fit("conjugate")
    post = p.posterior.params
    np.testing.assert_allclose([post["a"], post["b"]], [a + len(x), b + x.sum()], rtol=1e-12)
    evidence = betaln(a + len(x), b + x.sum()) - betaln(a, b)
    np.testing.assert_allclose(fit.elbo, evidence, rtol=1e-10)


def test_the_new_factor_message_is_the_gradient_of_the_expected_loglik():
    """d/d(E log p, E log(1-p)) of sum_n E log p(x_n | p) = (N, sum x)."""
    x = _data(50, seed=1)
    p = bg.Beta(2.0, 3.0, name="p")
    y = Geometric(p, plates=(len(x),), name="y").observe(x)
    bg.Model(y)
    np.testing.assert_allclose(y.message_to(p), (len(x), x.sum()), rtol=1e-12)
    u = [p.moments()]
    eps = 1e-6
    for k in range(2):
        up = [tuple(m + (eps if j == k else 0.0) for j, m in enumerate(u[0]))]
        um = [tuple(m - (eps if j == k else 0.0) for j, m in enumerate(u[0]))]
        cd = y.child_data()
        fd = (y.factor.expected_loglik(cd, up).sum() - y.factor.expected_loglik(cd, um).sum()) \
            / (2 * eps)
        np.testing.assert_allclose(fd, y.message_to(p)[k], rtol=1e-6)


def test_a_new_family_is_refused_data_outside_its_support():
    p = bg.Beta(2.0, 3.0, name="p")
    with pytest.raises(ValueError, match="non-negative integers"):
        Geometric(p, plates=(3,), name="y").observe([1.0, -1.0, 2.0])


def test_a_new_family_in_a_mixture_and_a_new_method():
    """The Geometric as a mixture component, fitted by a Method declared here (damped
    VMP): the same optimum as plain VMP, and a trace that never falls."""
    rng = np.random.default_rng(3)
    x = np.r_[rng.geometric(0.7, 300) - 1, rng.geometric(0.05, 300) - 1].astype(float)

    def build():
        w = bg.Dirichlet(np.ones(2), name="w")
        p = bg.Beta(1.0, 1.0, plates=(2,), name="p")
        z = bg.Categorical(w, plates=(len(x),), name="z")
        y = bg.Mixture(z, Geometric, p, name="y").observe(x)
        return bg.Model(y), p

    damped = bg.Method("damped", rho=0.7, description="VMP with every step damped")
    m1, p1 = build()
    f1 = m1.fit(damped, seed=0, tol=1e-12, max_iter=3000)
    m2, p2 = build()
    f2 = m2.fit("vmp", seed=0, tol=1e-12)
    assert f1.method == "damped" and f1.converged
    assert np.all(np.diff(f1.elbo_trace) >= -1e-9 * np.abs(f1.elbo_trace[1:]))
    np.testing.assert_allclose(f1.elbo, f2.elbo, rtol=1e-7)
    pm = np.sort(p1.posterior.mean)
    np.testing.assert_allclose(pm, np.sort(p2.posterior.mean), rtol=1e-5)
    assert abs(pm[0] - 0.05) < 0.02 and abs(pm[1] - 0.7) < 0.06
    # E log p under the posterior Beta, as the family math says
    a, b = p2.posterior.params["a"], p2.posterior.params["b"]
    np.testing.assert_allclose(p2.moments()[0], digamma(a) - digamma(a + b), rtol=1e-12)


class ChunkedView(DataView):
    """Every row, held as chunks of ``size`` rows of the data axis (as a backend that
    keeps its rows elsewhere would): each chunk fits its local block to the globals and
    reports its messages to them, its ELBO terms and its counts per component; the
    loop takes the steps with their sums (the seam of docs/dev/architecture.md)."""

    def __init__(self, model, structure, size):
        super().__init__(model, structure)
        self.chunks = [np.arange(a, min(a + size, structure.N)) for a in range(0, structure.N, size)]
        self.on_rows = frozenset(structure.links)
        self.report, self.reports = None, 0

    def _gather(self, block=None, update=None):
        """Each chunk's report (after fitting its local block when ``block`` is given)."""
        msgs, L, counts, sweeps = {}, 0.0, {}, 0
        for rows in self.chunks:
            with RowView(self.model, self.structure, rows, keep=self.structure.local) as v:
                if block is not None:
                    sweeps = max(sweeps, block.fit(v, update))
                for g in self.structure.globals:
                    for c in self.model.children[g]:
                        m = message_from(self.model, c, g) if c in self.on_rows else None
                        if m is not None:
                            old = msgs.get(g)
                            msgs[g] = m if old is None else tuple(a + b for a, b in zip(old, m))
                L += v.row_terms()
                for z in self.structure.assignments:
                    counts[z] = counts.get(z, 0.0) + v.counts(z)
        self.report, self.reports = {"msgs": msgs, "elbo": L, "counts": counts}, self.reports + 1
        return sweeps

    def fit_local(self, block, update):
        return self._gather(block, update)

    def messages(self, node):
        if self.report is None:          # the first step: from the start
            self._gather()
        msg = self.report["msgs"].get(node)
        for c in self.model.children[node]:       # children off the data axis: in memory
            m = None if c in self.on_rows else message_from(self.model, c, node)
            if m is not None:
                msg = m if msg is None else tuple(a + b for a, b in zip(msg, m))
        return msg

    def row_terms(self):
        return self.report["elbo"]

    def counts(self, z):
        return self.report["counts"][z]

    def split_tied(self, z, groups, rng):
        super().split_tied(z, groups, rng)
        self.report = None               # the next step reads the split rows


class ChunkedRows(Rows):
    """The rows source of a batch fit through :class:`ChunkedView` (as ``AllRows``; its
    rows' q live in the model, so the hooks of ``Rows`` serve)."""

    def __init__(self, model, structure, size):
        self.view = ChunkedView(model, structure, size)

    def next_view(self, rng):
        return self.view


@pytest.mark.parametrize("method,tied", [("vmp", False), ("em", False), ("vmp", True)])
def test_a_new_view_holding_rows_in_chunks_gives_the_in_memory_iterates(method, tied):
    """A GMM fitted through a view written here (rows in chunks of 70, each reporting its
    messages, ELBO terms and counts) takes the same steps as ``fit`` on all rows in
    memory: the same ELBO trace and posteriors up to the order of the sums (1e-12), from
    the same start. From tied responsibilities (every component the same) the view's
    counts find the symmetric saddle point and its split goes through the view."""
    rng = np.random.default_rng(0)
    means = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    X = means[rng.integers(0, 3, 400)] + rng.normal(size=(400, 2))
    R = np.full((400, 3), 1 / 3) if tied else rng.dirichlet(np.ones(3), size=400)

    def fit_through_the_view():
        model = gmm_model(X)
        m = get_method(method)
        opts = parse_options(m, dict(init=R, seed=0, max_iter=60))
        structure = Structure(model, None)
        plan = plan_run(model, m, opts, structure)
        plan.rows = ChunkedRows(model, structure, 70)
        gen = np.random.default_rng(0)
        _start(model, plan, opts, gen)
        run = Run(model, plan, gen)
        return model, plan, run, run.run()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ref = gmm_model(X)
        f = ref.fit(method, init=R, seed=0, max_iter=60)
        model, plan, run, converged = fit_through_the_view()
    assert sum("saddle point" in str(w.message) for w in seen) == (2 if tied else 0)
    assert run.kicks == (1 if tied else 0)
    assert plan.rows.view.reports >= len(run.trace) >= 5
    assert converged == f.converged and run.it == f.n_iter
    np.testing.assert_allclose(run.trace, f.elbo_trace, rtol=1e-12)
    for name in ("pi", "theta", "z"):
        for a, b in zip(model[name].nat, ref[name].nat):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.max(np.abs(b)))
