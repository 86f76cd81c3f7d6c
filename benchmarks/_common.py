"""Shared helpers of the benchmark scripts: machine description, memory and
time measurement, markdown tables, JSON output. Plain numpy/stdlib.

Memory is measured two ways around one call:

* ``tracemalloc`` peak: every numpy data buffer is reported to tracemalloc
  (numpy calls ``PyTraceMalloc_Track``), so this is the peak of Python + numpy
  heap allocated *during* the call, above what was live when it started.
* ``ru_maxrss``: the process' resident-set high-water mark. On Linux >= 4.0 it
  is reset to the current RSS before the call (``echo 5 > /proc/self/clear_refs``),
  so ``peak - RSS before`` is the call's own growth (it also counts BLAS
  buffers, C allocations tracemalloc cannot see, and memory-mapped file pages).
  Where the reset is not allowed the column holds the process-wide peak and is
  marked with ``*``.
"""
from __future__ import annotations

import datetime
import gc
import importlib
import json
import os
import platform
import resource
import sys
import time
import tracemalloc
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a clone without installing: find blrgraph next door
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

MB = 2.0 ** 20


# ---- machine ----------------------------------------------------------------------------
def machine_info():
    """nproc, CPU model, library versions, BLAS (threadpoolctl), relevant env values."""
    info = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "python": platform.python_version(), "platform": platform.platform(),
            "nproc": os.cpu_count()}
    try:
        info["nproc_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu"] = cpu or platform.processor()
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2 ** 20, 1)
    except (OSError, ValueError, IndexError):
        pass
    import scipy
    info["numpy"] = np.__version__
    info["scipy"] = scipy.__version__
    try:
        import sklearn
        info["sklearn"] = sklearn.__version__
    except ImportError:
        info["sklearn"] = None
    try:
        import blrgraph
        info["blrgraph"] = getattr(blrgraph, "__version__", "?")
    except ImportError:
        info["blrgraph"] = None
    try:
        from threadpoolctl import threadpool_info
        info["blas"] = [{k: d.get(k) for k in ("internal_api", "version", "num_threads",
                                                 "threading_layer", "architecture")}
                        for d in threadpool_info()]
    except ImportError:
        info["blas"] = "threadpoolctl not installed"
    env_keys = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "NVPL_BLAS_DEBUG_CPU_TYPE")
    info["env"] = {k: os.environ.get(k) for k in env_keys}
    info["git"] = _git_rev()
    info["loadavg_start"] = loadavg()
    return info


def loadavg():
    """1-minute load average (other processes on the machine inflate wall times)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _git_rev():
    try:
        import subprocess
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else None
    except Exception:  # noqa: BLE001 - informational only
        return None


def machine_markdown(info):
    blas = info.get("blas")
    if isinstance(blas, list):
        blas = "; ".join(f"{d.get('internal_api')} {d.get('version')} ({d.get('num_threads')} threads, "
                         f"{d.get('architecture')})" for d in blas) or "none reported"
    env = ", ".join(f"{k}={v}" for k, v in info.get("env", {}).items() if v is not None) or "none set"
    return (f"- date: {info['date']}; git: {info.get('git')}\n"
            f"- CPU: {info['cpu']}, nproc {info['nproc']}, RAM {info.get('mem_total_gb')} GB\n"
            f"- Python {info['python']}, numpy {info['numpy']}, scipy {info['scipy']}, "
            f"scikit-learn {info['sklearn']}, blrgraph {info['blrgraph']}\n"
            f"- BLAS: {blas}\n"
            f"- env: {env}\n"
            f"- 1-min load average at start / end: {info.get('loadavg_start')} / {loadavg()} "
            f"(with {info['nproc']} CPUs; above that, other processes shared the CPUs)\n")


# ---- memory -----------------------------------------------------------------------------
def _rss_now_mb():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError):
        return float("nan")


def _maxrss_mb():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (MB if sys.platform == "darwin" else 1024.0)


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def proc_status_mb(key):
    """A field of /proc/self/status in MB (e.g. 'RssAnon', 'RssFile'); nan if unavailable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return float("nan")


def measure_memory(fn, *args, **kwargs):
    """Run ``fn`` once under tracemalloc; returns (result, dict(tracemalloc_mb, maxrss_mb,
    maxrss_reset)). ``maxrss_mb`` is the RSS growth during the call (peak - RSS before)
    when the high-water mark could be reset, else the process-wide peak."""
    gc.collect()
    reset = _reset_peak_rss()
    before = _rss_now_mb()
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        out = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    maxrss = _maxrss_mb()
    return out, {"tracemalloc_mb": peak / MB,
                 "maxrss_mb": (maxrss - before) if reset else maxrss,
                 "maxrss_reset": reset}


def _mb(x):
    return f"{x:.1f}" if abs(x) < 10 else f"{x:.0f}"


def fmt_mem(m):
    if m is None:
        return "-"
    star = "" if m.get("maxrss_reset", True) else "*"
    return f"{_mb(m['tracemalloc_mb'])} / {_mb(m['maxrss_mb'])}{star}"


# ---- time -------------------------------------------------------------------------------
class Clock:
    """Wall clock (and process CPU clock, all threads) that can leave out evaluation time
    spent in callbacks."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.c0 = time.process_time()
        self.excluded = 0.0
        self.excluded_cpu = 0.0

    def now(self):
        return time.perf_counter() - self.t0 - self.excluded

    def cpu(self):
        return time.process_time() - self.c0 - self.excluded_cpu

    def exclude(self, fn, *a, **k):
        s, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            self.excluded += time.perf_counter() - s
            self.excluded_cpu += time.process_time() - c


def sweep_clock():
    """(callback, wall stamps, CPU stamps): a fit callback that records the wall and
    process CPU time at the end of every sweep."""
    stamps, cpu = [], []

    def cb(it, L):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        return False
    return cb, stamps, cpu


def per_iter(stamps, skip=1):
    """Median interval between successive time stamps, leaving out the first ``skip``
    intervals (warm-up). The median, not the mean: on a shared machine a few intervals
    are inflated by other processes. Returns (median, list of intervals used)."""
    d = np.diff(np.asarray(stamps, dtype=float))
    d = d[skip:] if len(d) > skip else d
    return float(np.median(d)), [float(x) for x in d]


def loglog_slope(x, y):
    """Least-squares slope of log y on log x (1.0 = linear growth)."""
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(x, y, 1)[0])


# ---- output -----------------------------------------------------------------------------
def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def fmt_t(s):
    if s is None or (isinstance(s, float) and not np.isfinite(s)):
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_x(r):
    if r is None or not np.isfinite(r):
        return "-"
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def write_json(path, payload):
    if not path:
        return
    with open(path, "w") as f:
        from blrgraph.io import jsonable
        json.dump(jsonable(payload), f, indent=1)
    print(f"\nwrote {path}")


def command_line():
    return "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])


def limit_blas(n):
    """--blas-threads: cap BLAS/OpenMP threads for the whole run (threadpoolctl); None = as is."""
    if not n:
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("--blas-threads needs threadpoolctl; running with the default thread count")
        return None
    # a BLAS loaded after the limit runs with its default threads: scipy's own OpenBLAS
    # comes with scipy.linalg, which the peers import lazily (BayesPy's import loaded it
    # with 2 threads in bench_jmlr.py's runs before 2026-11-27 12:55, docs/benchmarks.md
    # §12.13), so the libraries that bring a BLAS are imported first
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("scipy.linalg", "sklearn.utils", "bayespy", "hmmlearn.hmm"):
            try:
                importlib.import_module(name)
            except ImportError:   # (optional peers)
                pass
    return threadpool_limits(limits=int(n))
