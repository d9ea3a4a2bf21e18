"""Deterministic random train/val/test splits for datasets that ship without one."""

from __future__ import annotations

import numpy as np

from fleetgnn.errors import DatasetError


def random_split(
    y: np.ndarray,
    num_train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Planetoid-style random split: a fixed number of training nodes per class, then val, test.

    The labelled nodes (``y >= 0``) are shuffled once with ``np.random.default_rng(seed)``. In that
    order, the first ``num_train_per_class`` nodes of each class form the training set; of the
    remaining nodes (still in shuffled order) the first ``num_val`` form the validation set and the
    next ``num_test`` the test set. Everything else, and every unlabelled node, is in no split.
    The result depends only on ``y`` and ``seed`` (numpy's PCG64 stream is stable across
    versions), so the same call always gives the same masks.

    Args:
        y: int ``[N]`` labels, ``-1`` = unlabelled.
        num_train_per_class: Training nodes per class; every class in ``0..max(y)`` needs at least
            that many labelled nodes.
        num_val: Validation nodes.
        num_test: Test nodes.
        seed: Seed of the shuffle.

    Returns:
        ``(train_mask, val_mask, test_mask)``, pairwise disjoint bool ``[N]``.

    Raises:
        DatasetError: If a count is negative or there are too few labelled nodes.
    """
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"labels must be a 1-D integer array (got {y.dtype} {y.shape})")
    for arg, val in (
        ("num_train_per_class", num_train_per_class),
        ("num_val", num_val),
        ("num_test", num_test),
    ):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise DatasetError(f"'{arg}' must be an integer >= 0 (got {val!r})")
    n = y.shape[0]
    labelled = np.flatnonzero(y >= 0)
    masks = tuple(np.zeros(n, dtype=bool) for _ in range(3))
    if labelled.size == 0:
        if num_train_per_class or num_val or num_test:
            raise DatasetError(
                "cannot split: no node is labelled (every label is -1); give labels or set "
                "num_train_per_class = num_val = num_test = 0"
            )
        return masks  # type: ignore[return-value]
    rng = np.random.default_rng(seed)
    perm = labelled[rng.permutation(labelled.size)]
    cls = y[perm]
    counts = np.bincount(cls)
    short = np.flatnonzero(counts < num_train_per_class)
    if short.size:
        c = int(short[0])
        raise DatasetError(
            f"class {c} has {int(counts[c])} labelled nodes, fewer than num_train_per_class = "
            f"{num_train_per_class}; pass a smaller num_train_per_class (fleetgnn prepare: "
            f"--num-train-per-class {int(counts[c])}), or give your own split (prepare "
            f"edgelist: --train-mask/--val-mask/--test-mask)"
        )
    order = np.argsort(cls, kind="stable")  # grouped by class, shuffled order inside a class
    first = np.searchsorted(cls[order], cls[order], side="left")
    rank = np.empty(perm.size, dtype=np.int64)
    rank[order] = np.arange(perm.size) - first
    is_train = rank < num_train_per_class
    rest = perm[~is_train]
    if rest.size < num_val + num_test:
        raise DatasetError(
            f"after {int(is_train.sum())} training nodes only {rest.size} labelled nodes remain, "
            f"fewer than num_val + num_test = {num_val} + {num_test}; pass smaller num_val / "
            f"num_test (fleetgnn prepare: --num-val / --num-test)"
        )
    train, val, test = masks
    train[perm[is_train]] = True
    val[rest[:num_val]] = True
    test[rest[num_val : num_val + num_test]] = True
    return train, val, test
