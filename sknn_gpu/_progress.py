"""Progress and verbosity: one logger per family, a progress bar on a terminal.

Every estimator's ``verbose`` parameter (int) goes through here:

* ``verbose=0`` (default): silent.
* ``verbose>=1``: a summary line per call at INFO on the family's logger
  (``sknn_gpu.memory``, ``sknn_gpu.fly``, ``sknn_gpu.halftone``, ``sknn_gpu.sparse``,
  ``sknn_gpu.neural_network``), and a progress bar for long loops when stderr is a
  terminal (tqdm when it is installed — it is optional — else a plain ``\\r`` line).
* ``verbose>=2``: one INFO line per step (epoch, sweep, batch) as well.
* A loop that passes ``log_every`` (seconds) also logs, at ``verbose=1`` when there is
  no progress bar (stderr is not a terminal: a log file, a pipe, a batch job), one INFO
  line at most that often, so a long call shows how far it got.

Every record carries ``record.sknn_gpu_progress``: ``"step"`` for a step line and
``"summary"`` for the closing summary, so a handler or filter can tell them apart.

The messages go through :mod:`logging`, so applications route them as they like. When
nothing is configured (no handler on the ``sknn_gpu`` logger or the root logger), a
``verbose`` call attaches one stderr handler to the ``sknn_gpu`` logger, so that
``verbose=1`` shows something in a plain script, as scikit-learn's ``verbose`` does.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["family_logger", "Progress"]

_ROOT_NAME = "sknn_gpu"
#: ``extra`` of the step and summary records (``record.sknn_gpu_progress``).
_STEP = {"sknn_gpu_progress": "step"}
_SUMMARY = {"sknn_gpu_progress": "summary"}


def family_logger(obj) -> logging.Logger:
    """The logger of the family ``obj`` (an estimator, a class or a module name) belongs to."""
    if isinstance(obj, str):
        module = obj
    elif isinstance(obj, type):
        module = obj.__module__
    else:
        module = type(obj).__module__
    parts = module.split(".")
    name = ".".join(parts[:2]) if parts[0] == _ROOT_NAME and len(parts) > 1 else _ROOT_NAME
    return logging.getLogger(name)


def _ensure_handler():
    root_pkg = logging.getLogger(_ROOT_NAME)
    if root_pkg.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root_pkg.addHandler(handler)
    if root_pkg.level == logging.NOTSET:
        root_pkg.setLevel(logging.INFO)


def _tty():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


#: Off a terminal at ``verbose=1``, a long loop logs how far it got at most this often
#: (seconds), so a long call shows it is alive in a log file; short calls log only their
#: summary line. Read when a :class:`Progress` is made with ``log_every=True``.
LOG_EVERY_SECONDS = 5.0


class Progress:
    """Report the progress of a loop of ``total`` steps.

    Parameters
    ----------
    owner : object
        The estimator (its family picks the logger).
    desc : str
        What the loop does, e.g. ``"fit: epochs"``.
    total : int or None
        Number of steps when known.
    verbose : int
        The estimator's ``verbose``; 0 makes every method a no-op.
    unit : str
        Name of one step for the bar.
    log_every : float, True or None, default=None
        Off a terminal at ``verbose=1`` (no bar): log a step line when at least this many
        seconds passed since the start or the last such line. True: every
        :data:`LOG_EVERY_SECONDS` (what long loops of the estimators pass). None: the
        summary only.

    Examples
    --------
    >>> from sknn_gpu._progress import Progress
    >>> with Progress("sknn_gpu.fly", "predict: batches", total=3, verbose=0) as bar:
    ...     for _ in range(3):
    ...         bar.update(loss=0.5)
    >>> bar.n
    3
    """

    def __init__(self, owner, desc, total=None, verbose=0, unit="it", log_every=None):
        self.verbose = int(verbose or 0)
        self.desc, self.total, self.unit = desc, total, unit
        self.log_every = LOG_EVERY_SECONDS if log_every is True else log_every
        self.logger = family_logger(owner)
        self.n = 0
        self._bar = None
        self._plain = False
        self._t0 = self._logged = time.perf_counter()
        if self.verbose <= 0:
            return
        _ensure_handler()
        if _tty():
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)
            except ImportError:
                self._plain = True

    def update(self, n=1, **info):
        """Advance by ``n`` steps; ``info`` (e.g. ``loss=0.3``) is shown/logged with the step."""
        self.n += n
        if self.verbose <= 0:
            return
        text = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
        of = f"/{self.total}" if self.total else ""
        if self._bar is not None:
            self._bar.update(n)
            if info:
                self._bar.set_postfix_str(text, refresh=False)
        elif self._plain:
            sys.stderr.write(f"\r{self.desc}: {self.n}{of} {self.unit} {text}   ")
            sys.stderr.flush()
        if self.verbose >= 2:
            self.logger.info("%s %d%s%s", self.desc, self.n, of, f": {text}" if text else "", extra=_STEP)
        elif self.log_every is not None and self._bar is None and not self._plain:
            now = time.perf_counter()
            if now - self._logged >= self.log_every:
                self._logged = now
                unit = f" {self.unit}" if self.unit else ""
                after = f" after {now - self._t0:.1f} s"
                self.logger.info(
                    "%s %d%s%s%s%s",
                    self.desc,
                    self.n,
                    of,
                    unit,
                    after,
                    f": {text}" if text else "",
                    extra=_STEP,
                )

    def close(self, **summary):
        """End the loop; at ``verbose>=1`` log one summary line with the elapsed time."""
        if self.verbose <= 0:
            return
        if self._bar is not None:
            self._bar.close()
        elif self._plain:
            sys.stderr.write("\n")
        text = "".join(f", {k}={v:.6g}" if isinstance(v, float) else f", {k}={v}" for k, v in summary.items())
        self.logger.info(
            "%s: %d %s in %.3f s%s",
            self.desc,
            self.n,
            self.unit,
            time.perf_counter() - self._t0,
            text,
            extra=_SUMMARY,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
