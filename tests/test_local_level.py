"""The local level / local linear trend zoo model (models/local_level.py) and its
command line (``blrgraph fit local_level data.csv --column y``).

Oracles: at the VMP fixed point q(states) is the Kalman smoother run with the noise
precisions at their posterior means E[q], E[r] (the chain's update is exact given
them), so the smoothed states equal the reference filter of tests/test_kalman.py
with those plug-in precisions; the noise standard deviations of a long simulated
series are recovered; the trace never decreases.
"""
from __future__ import annotations

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from blrgraph.inference.blr import blr_step  # noqa: E402
from test_cli import run            # noqa: E402
from test_kalman import kalman_reference  # noqa: E402
from test_zoo import load            # noqa: E402

ll = load("local_level")


def simulate(T, sd_level, sd_obs, seed, sd_slope=None):
    rng = np.random.default_rng(seed)
    if sd_slope is None:
        level = 10.0 + np.cumsum(rng.normal(0, sd_level, T))
    else:
        slope = np.cumsum(rng.normal(0, sd_slope, T))
        level = np.cumsum(slope + rng.normal(0, sd_level, T))
    return level + rng.normal(0, sd_obs, T)


def fit(model):
    return model.fit(ll.DEFAULT_METHOD, seed=0, **model.meta["fit_options"])


def _monotone(trace):
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))


@pytest.mark.parametrize("trend", [False, True])
def test_states_are_the_kalman_smoother_at_the_posterior_precisions(trend):
    y = simulate(200, 0.5, 1.0, seed=1, sd_slope=0.05 if trend else None)
    y[[20, 21, 22, 150]] = np.nan
    model = ll.build(pd.DataFrame({"y": y}), trend=trend)
    res = fit(model)
    assert res.converged
    _monotone(res.elbo_trace)
    blr_step(model, model["x"])   # q(states) given the final q(q), q(r) (r is updated after x)
    Eq = model["q"].posterior.mean
    Er = float(model["r"].posterior.mean)
    D = 2 if trend else 1
    A = np.array([[1.0, 1.0], [0.0, 1.0]]) if trend else np.eye(1)
    obs = np.isfinite(y)
    m0 = np.zeros(D)
    m0[0] = np.nanmean(y)
    V0 = np.eye(D) * np.nanvar(y) / 1e-4
    H = np.eye(D)[:1]
    _, ms, Vs, _ = kalman_reference(np.nan_to_num(y)[:, None], obs, m0, V0, A, np.diag(1 / Eq),
                                    np.eye(1) / Er, H=H)
    st = ll.states(res)
    # the diffuse start (variance 1e4 var(y)) costs the covariance-form reference digits
    # at the first steps of the trend model (measured: 4e-10 relative; 1.3e-9 in the sd
    # with the states updated after the precisions)
    tol = 3e-9 if trend else 1e-10
    np.testing.assert_allclose(st["level"], ms[:, 0], rtol=0, atol=tol * np.abs(ms).max())
    np.testing.assert_allclose(st["level_sd"], np.sqrt(Vs[:, 0, 0]), rtol=tol)
    if trend:
        np.testing.assert_allclose(st["slope"], ms[:, 1], atol=tol * np.abs(ms).max())
    assert np.isnan(st["y"][21]) and np.isfinite(st["level"][21])


def test_recovers_the_noise_standard_deviations():
    y = simulate(3000, 0.5, 1.0, seed=2)
    res = fit(ll.build(y))
    s = ll.summarize(res).set_index("term")
    # measured: 1.011 (95% interval 0.986-1.037) and 0.4915 (0.479-0.504); truth 1 and 0.5
    for term, truth in (("observation noise", 1.0), ("level noise", 0.5)):
        assert s.loc[term, "q2.5"] < truth < s.loc[term, "q97.5"]
        assert s.loc[term, "q2.5"] < s.loc[term, "sd"] < s.loc[term, "q97.5"]


def test_forecast_widens_and_continues_the_level():
    y = simulate(300, 0.3, 1.0, seed=3)
    res = fit(ll.build(y))
    fc = ll.forecast(res, steps=5)
    st = ll.states(res)
    assert list(fc["t"]) == [300, 301, 302, 303, 304]
    np.testing.assert_allclose(fc["mean"], st["level"].iloc[-1])
    assert np.all(np.diff(fc["sd"]) > 0)


def test_bad_input_names_the_column():
    df = pd.DataFrame({"a": np.arange(10.0), "b": np.arange(10.0)})
    with pytest.raises(ValueError, match="--column"):
        ll.build(df)
    with pytest.raises(ValueError, match="not numeric"):
        ll.build(pd.DataFrame({"c": list("abcabcabca")}))
    with pytest.raises(ValueError, match="constant"):
        ll.build(np.ones(10))
    with pytest.raises(ValueError, match="at least 2"):
        ll.build(np.array([1.0, np.nan, np.nan]))


def test_command_line(tmp_path):
    y = simulate(150, 0.5, 1.0, seed=4)
    y[10] = np.nan
    path = tmp_path / "series.csv"
    pd.DataFrame({"day": np.arange(150), "y": y}).to_csv(path, index=False)
    code, stdout, stderr = run("fit", "local_level", path, "--column", "y", "--out", tmp_path / "o")
    assert code == 0, stderr
    states = pd.read_csv(tmp_path / "o" / "states.csv")
    assert len(states) == 150 and np.isfinite(states.level).all()
    summary = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert list(summary.term) == ["observation noise", "level noise"]
    code, _, stderr = run("fit", "local_level", path, "--out", tmp_path / "p")
    assert code == 1 and "--column" in stderr
    code, _, stderr = run("fit", "local_level", path, "--column", "y", "--option", "trend=True",
                          "--out", tmp_path / "q")
    assert code == 0, stderr
    assert "slope noise" in set(pd.read_csv(tmp_path / "q" / "summary.csv").term)
