"""fit() keywords of docs/api.md: callback, progress, max_iter, tol."""
import numpy as np
import pytest

import blrgraph as bg


def _mean_field_model():
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 2.0, size=50)
    mu = bg.Normal(0.0, 1e-2, name="mu")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    y = bg.Normal(mu, tau, plates=(50,), name="y").observe(x)
    return bg.Model(y)


def test_callback_sees_every_iteration_and_can_stop_the_run():
    seen = []

    def cb(it, elbo):
        seen.append((it, elbo))
        return it == 3

    res = _mean_field_model().fit("vmp", tol=0.0, max_iter=50, callback=cb)
    assert [it for it, _ in seen] == [1, 2, 3]
    assert res.n_iter == 3 and not res.converged
    np.testing.assert_array_equal(res.elbo_trace, [e for _, e in seen])


def test_progress_bar_reports_on_stderr(capsys):
    res = _mean_field_model().fit("vmp", progress=True)
    assert res.converged
    assert "fit('vmp')" in capsys.readouterr().err


def test_max_iter_caps_the_sweeps_and_tol_ends_the_run():
    capped = _mean_field_model().fit("vmp", tol=0.0, max_iter=4)
    assert capped.n_iter == 4 and not capped.converged and len(capped.elbo_trace) == 4
    done = _mean_field_model().fit("vmp", tol=1e-10, max_iter=500)
    assert done.converged and done.n_iter < 500
    last = done.elbo_trace
    assert abs(last[-1] - last[-2]) <= 1e-10 * abs(last[-1])
    with pytest.raises(ValueError, match="max_iter"):
        _mean_field_model().fit("vmp", max_iter=0)
