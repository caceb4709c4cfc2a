"""Model selection for associative memories: probe what was stored.

scikit-learn's cross-validation stores (fits) the training rows and scores the held-out
rows. A memory recalls only what it stored, so a held-out message is never recalled and
every such score is 0. Here the two roles are re-cast:

* :class:`StoredMessagesCV` yields splits whose training rows are **all** the messages
  (every candidate memory stores the whole set, at its real load) and whose test rows
  are a part of them, the probe set;
* :func:`erased_recall_scorer` builds a scorer that erases symbols of the test rows it is
  given (stored messages) and scores the exact recall of the completions.

Together: ``GridSearchCV(GBNNMemory(), grid, scoring=erased_recall_scorer(2),
cv=StoredMessagesCV(3))`` ranks parameters by how well the memory recalls its messages.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np
from sklearn.model_selection import BaseCrossValidator
from sklearn.utils import check_random_state

from .._backend import array_module, is_device_array, to_device
from .._typing import ArrayLike

__all__ = ["StoredMessagesCV", "erased_recall_scorer", "erase_symbols"]


def _check_n_erased(n_erased):
    """``n_erased`` as given, after the type and range checks (an int >= 1 or a fraction)."""
    if isinstance(n_erased, bool) or not isinstance(n_erased, numbers.Real):
        raise TypeError(f"n_erased must be an int >= 1 or a float in (0, 1), got {n_erased!r}.")
    if isinstance(n_erased, numbers.Integral):
        if n_erased < 1:
            raise ValueError(f"n_erased must be >= 1 erased symbol per message, got {n_erased}.")
        return int(n_erased)
    if not 0.0 < float(n_erased) < 1.0:
        raise ValueError(
            f"n_erased as a float is the fraction of each message's symbols to erase and must lie "
            f"in (0, 1), got {n_erased!r}."
        )
    return float(n_erased)


def _erased_count(n_erased, n_clusters):
    """How many of ``n_clusters`` symbols ``n_erased`` (an int or a fraction) erases."""
    e = n_erased if isinstance(n_erased, int) else max(1, int(round(n_erased * n_clusters)))
    if e >= n_clusters:
        raise ValueError(
            f"n_erased={n_erased!r} erases {e} of the {n_clusters} symbols of each message; at least "
            "one symbol must stay known for the memory to complete the others."
        )
    return e


def erase_symbols(
    messages: ArrayLike, n_erased: int | float, *, random_state: int | np.random.RandomState | None = 0
) -> Any:
    """Probes made from messages: a copy with ``n_erased`` symbols per row set to ``-1``.

    The erased positions are drawn uniformly per row (without repetition within a row)
    from ``random_state`` on the host, so they are the same for NumPy and CuPy input.

    Parameters
    ----------
    messages : array-like of shape (n_messages, n_clusters)
        Integer symbols (NumPy or CuPy; the probes have the same array type).
    n_erased : int or float
        Symbols erased per message: an int in ``[1, n_clusters)``, or a float in
        ``(0, 1)``, the fraction of ``n_clusters`` (rounded, at least 1).
    random_state : int, RandomState instance or None, default=0
        Seeds the erased positions. An int gives the same probes at every call.

    Returns
    -------
    probes : ndarray of shape (n_messages, n_clusters), int64
        The messages with ``-1`` at the erased positions.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.memory import erase_symbols
    >>> messages = np.arange(12).reshape(3, 4)
    >>> probes = erase_symbols(messages, 2, random_state=0)
    >>> (probes == -1).sum(axis=1).tolist()
    [2, 2, 2]
    >>> bool(((probes == messages) | (probes == -1)).all())
    True
    """
    n_erased = _check_n_erased(n_erased)
    xp = array_module(messages) if is_device_array(messages) else np
    X = xp.asarray(messages)
    if X.ndim != 2:
        raise ValueError(f"messages must be a 2-D array (n_messages, n_clusters), got shape {X.shape}.")
    n, C = X.shape
    e = _erased_count(n_erased, C)
    rs = check_random_state(random_state)
    cols = np.argsort(rs.random_sample((n, C)), axis=1)[:, :e]
    mask = np.zeros((n, C), dtype=bool)
    np.put_along_axis(mask, cols, True, axis=1)
    if xp is not np:
        mask = to_device(mask, "cuda")
    return xp.where(mask, np.int64(-1), X.astype(np.int64))


class _ErasedRecallScorer:
    """The scorer :func:`erased_recall_scorer` returns (a named, picklable callable)."""

    def __init__(self, n_erased, random_state):
        self.n_erased = n_erased
        self.random_state = random_state

    def __call__(self, estimator, X, y=None, **kwargs):
        probes = erase_symbols(X, self.n_erased, random_state=self.random_state)
        return float(estimator.score(probes, X))

    def __repr__(self):
        return f"erased_recall_scorer(n_erased={self.n_erased!r}, random_state={self.random_state!r})"


def erased_recall_scorer(
    n_erased: int | float, *, random_state: int | np.random.RandomState | None = 0
) -> Any:
    """A scorer of associative memories: erase symbols of stored messages, score the recall.

    The returned callable ``scorer(memory, X, y=None)`` is a scikit-learn scorer (pass it
    as ``scoring=`` to ``GridSearchCV``, ``cross_val_score`` or ``cross_validate``). It
    erases ``n_erased`` symbols of every message of ``X`` (:func:`erase_symbols`) and
    returns ``memory.score(probes, X)``: the fraction of probes the memory completes
    exactly. Higher is better.

    ``X`` must hold messages the memory **stored**: a memory recalls only what it
    stored, so held-out messages score 0 by nature. Use it with
    :class:`StoredMessagesCV`, whose test rows are stored rows. ``y`` is ignored (the
    truth is ``X`` itself), so ``search.fit(messages)`` needs no ``y``.

    Parameters
    ----------
    n_erased : int or float
        Symbols erased per message: an int in ``[1, n_clusters)``, or a float in
        ``(0, 1)``, the fraction of the clusters (rounded, at least 1). It is the
        question asked of the memory, not a parameter of it.
    random_state : int, RandomState instance or None, default=0
        Seeds the erased positions. The default int gives every candidate of a search
        the same probes, so their scores differ only by the parameters; None draws new
        positions at every call.

    Returns
    -------
    scorer : callable
        ``scorer(memory, X, y=None) -> float``, the exact-recall rate in ``[0, 1]``.

    See Also
    --------
    StoredMessagesCV : Splits that store every message and probe a part of them.
    GBNNMemory.score : The exact-recall rate of given probes.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sknn_gpu.memory import GBNNMemory, StoredMessagesCV, erased_recall_scorer
    >>> messages = np.random.default_rng(0).integers(0, 64, size=(1000, 8))
    >>> search = GridSearchCV(
    ...     GBNNMemory(device="cpu", random_state=0),
    ...     {"rule": ["sum-of-sum", "joint"]},
    ...     scoring=erased_recall_scorer(5),
    ...     cv=StoredMessagesCV(n_splits=3),
    ... ).fit(messages)
    >>> search.best_params_
    {'rule': 'joint'}
    >>> search.cv_results_["mean_test_score"].round(2).tolist()
    [0.97, 0.99]
    """
    return _ErasedRecallScorer(_check_n_erased(n_erased), random_state)


class StoredMessagesCV(BaseCrossValidator):
    """Cross-validation splits for memories: store every message, probe a part of them.

    Each split's training indices are **all** the rows, so every candidate memory
    stores the whole set (at the load it will have in use), and its test indices are
    a part of the rows: the probe set, whose messages a scorer such as
    :func:`erased_recall_scorer` erases and asks the memory to complete. By default
    the parts are ``n_splits`` disjoint, (nearly) equal blocks of consecutive rows,
    like :class:`~sklearn.model_selection.KFold`'s test folds, so the mean test score
    is the recall over all stored messages and its spread shows how much it varies
    between probe sets.

    Parameters
    ----------
    n_splits : int, default=3
        Number of splits (probe sets), at least 1. ``n_splits=1`` probes every row once.
    shuffle : bool, default=False
        Whether to shuffle the rows before cutting them into parts.
    probe_size : int, float or None, default=None
        None: the parts described above. An int: each split probes that many rows; a
        float in ``(0, 1]``: that fraction of the rows. The rows of each split are then
        drawn without replacement from ``random_state``, independently between splits
        (for large memories, where probing every message of every candidate costs too
        much).
    random_state : int, RandomState instance or None, default=None
        Seeds the shuffle and the draws; an int gives the same splits at every call.

    See Also
    --------
    erased_recall_scorer : The scorer to use with these splits.
    sklearn.model_selection.KFold : Held-out folds, which a memory scores 0 on.

    Notes
    -----
    A memory's parameters (``rule``, ``max_iter``, ``gamma``, ``ambiguous``,
    ``cluster_size``) change how it recalls the messages it holds; they do not make it
    recall messages it never stored. So the question a search answers is "which memory
    completes the stored messages best from part of them", and the splits keep the
    stored set whole.

    Examples
    --------
    >>> import numpy as np
    >>> from sknn_gpu.memory import StoredMessagesCV
    >>> X = np.zeros((7, 4))
    >>> for train, test in StoredMessagesCV(n_splits=3).split(X):
    ...     print(len(train), test.tolist())
    7 [0, 1, 2]
    7 [3, 4]
    7 [5, 6]
    >>> [test.size for _, test in StoredMessagesCV(2, probe_size=0.5, random_state=0).split(X)]
    [4, 4]
    """

    def __init__(
        self,
        n_splits: int = 3,
        *,
        shuffle: bool = False,
        probe_size: int | float | None = None,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) or n_splits < 1:
            raise ValueError(f"n_splits must be an int >= 1, got {n_splits!r}.")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be True or False, got {shuffle!r}.")
        if probe_size is not None:
            bad = isinstance(probe_size, bool) or not isinstance(probe_size, numbers.Real)
            if not bad and isinstance(probe_size, numbers.Integral):
                bad = probe_size < 1
            elif not bad:
                bad = not 0.0 < float(probe_size) <= 1.0
            if bad:
                raise ValueError(
                    f"probe_size must be None, an int >= 1 (rows per split) or a float in (0, 1] "
                    f"(a fraction of the rows), got {probe_size!r}."
                )
        self.n_splits = int(n_splits)
        self.shuffle = shuffle
        self.probe_size = probe_size
        self.random_state = random_state

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        """The number of splits, ``n_splits``.

        Parameters
        ----------
        X, y, groups : object
            Ignored; present for API compatibility.

        Returns
        -------
        n_splits : int
        """
        return self.n_splits

    def _probes(self, n):
        """The test (probe) rows of each split, for ``n`` rows."""
        if self.probe_size is None:
            if self.n_splits > n:
                raise ValueError(
                    f"Cannot have n_splits={self.n_splits} probe sets of at least one of the {n} "
                    "messages; lower n_splits or pass probe_size."
                )
            rows = np.arange(n)
            if self.shuffle:
                check_random_state(self.random_state).shuffle(rows)
            return np.array_split(rows, self.n_splits)
        size = self.probe_size
        k = int(size) if isinstance(size, numbers.Integral) else max(1, int(round(float(size) * n)))
        if k > n:
            raise ValueError(f"probe_size={size} is more than the {n} messages.")
        rs = check_random_state(self.random_state)
        return [np.sort(rs.choice(n, size=k, replace=False)) for _ in range(self.n_splits)]

    def split(
        self, X: ArrayLike, y: Any = None, groups: Any = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Generate ``(train, test)`` indices: train is every row, test a probe set.

        Parameters
        ----------
        X : array-like of shape (n_messages, n_clusters)
            The messages (only their number is read).
        y, groups : object
            Ignored; present for API compatibility.

        Yields
        ------
        train : ndarray of int
            ``arange(n_messages)``: every message is stored.
        test : ndarray of int
            The rows probed in this split.
        """
        n = int(X.shape[0]) if hasattr(X, "shape") else len(X)
        everything = np.arange(n)
        for test in self._probes(n):
            yield everything, test
