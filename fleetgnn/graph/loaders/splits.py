"""Train/val/test splits: deterministic random ones, and the user's own from files.

A dataset that ships without a split gets :func:`random_split`. A user who has a split gives it
either as one ``.npy`` mask file per set (:func:`load_mask_files`; ``prepare edgelist`` / ``npz``
``--train-mask`` / ``--val-mask`` / ``--test-mask``) or as one split file holding all three
(:func:`load_split_file`; ``--split FILE``):

* ``.npz`` with arrays ``train``, ``val``, ``test``: each a bool mask of ``N`` entries or an
  integer array of node IDs;
* ``.json`` ``{"train": [...], "val": [...], "test": [...]}``: each a list of node IDs or of
  ``N`` booleans.

``train`` is required, ``val`` / ``test`` may be left out (empty). Every set is checked: masks
of the right length, IDs in ``[0, N)`` and without repeats, sets pairwise disjoint, labelled
nodes only. Every failure is one :class:`~fleetgnn.errors.DatasetError` line naming the file.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fleetgnn.config.textfile import load_json_file
from fleetgnn.errors import DatasetError, FleetgnnError
from fleetgnn.graph.loaders._io import READ_ERRORS, load_npy, npy_header, require_file

#: The mask arguments (and ``Graph`` fields) of a split, in order.
MASKS: tuple[str, ...] = ("train_mask", "val_mask", "test_mask")
#: The keys of a split file, in order.
SPLIT_KEYS: tuple[str, ...] = ("train", "val", "test")
_JSON_BYTES_PER_ENTRY = 32  # generous: a pretty-printed 19-digit ID with indent and comma
_JSON_SLACK = 1 << 20


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
            f"edgelist / npz: --train-mask/--val-mask/--test-mask or --split FILE)"
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


def _flag(arg: str) -> str:
    """``train_mask`` -> ``train_mask (--train-mask)``: the argument and its CLI flag."""
    return f"{arg} (--{arg.replace('_', '-')})"


def check_split_args(
    masks: Mapping[str, object],
    knobs: Mapping[str, int | None],
    *,
    split_file: object = None,
    has_labels: bool | None = None,
    labels_hint: str = "labels (--labels)",
) -> None:
    """Refuse split arguments that cannot apply together, before any data is read.

    Args:
        masks: The mask files given, by argument name (``train_mask``, ...).
        knobs: The random split's arguments (``num_train_per_class``, ``num_val``,
            ``num_test``, ``split_seed``); ``None`` = not given.
        split_file: The split file (``--split``), or ``None``.
        has_labels: Whether the data has labels; ``None`` when not known yet (then the checks
            that need it are left to :func:`user_split`).
        labels_hint: How the user supplies labels, for messages.

    Raises:
        DatasetError: A user split without labels, mask files without ``train_mask``, a split
            file and mask files together, or a user split with the random split's arguments.
    """
    own = next(iter(masks), None) or ("split (--split)" if split_file is not None else None)
    if own is not None and has_labels is False:
        what = _flag(own) if own in MASKS else own
        raise DatasetError(f"{what} needs {labels_hint}: a split selects labelled nodes")
    if masks and "train_mask" not in masks:
        raise DatasetError(
            f"{_flag(next(iter(masks)))} was given without train_mask (--train-mask); give the "
            "training nodes too (a split without them cannot train)"
        )
    mixed = [k for k, v in knobs.items() if v is not None]
    # without labels there is nothing to split: only knobs asking for nodes are an error
    if has_labels is False and any(knobs[k] for k in mixed):
        raise DatasetError(
            f"{_flag(next(k for k in mixed if knobs[k]))} sets the random split, which needs "
            f"{labels_hint}"
        )
    if masks and split_file is not None:
        raise DatasetError(
            f"split (--split) '{split_file}' holds the whole split but {_flag(next(iter(masks)))} "
            "was given too; pass the split file or the mask files, not both"
        )
    if own is not None and mixed:
        how = "by mask files" if masks else f"by the split file '{split_file}'"
        raise DatasetError(
            f"{_flag(mixed[0])} draws a random split but the split is given {how}; pass one or "
            "the other"
        )


def user_split(
    y: np.ndarray | None,
    masks: Mapping[str, str | os.PathLike[str]],
    split_file: str | os.PathLike[str] | None,
    *,
    labels_hint: str = "labels (--labels)",
) -> dict[str, np.ndarray] | None:
    """The user's own split from mask files or a split file; ``None`` when neither is given.

    Args:
        y: int ``[N]`` labels (``-1`` = unlabelled), or ``None`` if the data has none.
        masks: Mask files by argument name (see :func:`load_mask_files`).
        split_file: A split file (see :func:`load_split_file`).
        labels_hint: How the user supplies labels, for messages.

    Returns:
        ``{"train_mask": ..., "val_mask": ..., "test_mask": ...}`` (bool ``[N]``) or ``None``.

    Raises:
        DatasetError: See :func:`check_split_args`, :func:`load_mask_files` and
            :func:`load_split_file`.
    """
    if not masks and split_file is None:
        return None
    check_split_args(
        masks, {}, split_file=split_file, has_labels=y is not None, labels_hint=labels_hint
    )
    if y is None:  # refused by check_split_args; narrows the type
        raise DatasetError(f"a split needs {labels_hint}")
    if split_file is not None:
        return load_split_file(split_file, y)
    return load_mask_files(masks, y)


def _check_sets(sets: dict[str, tuple[np.ndarray, str]], y: np.ndarray) -> dict[str, np.ndarray]:
    """Masks by field name from ``{field: (mask, where)}``: labelled nodes only, disjoint."""
    out: dict[str, np.ndarray] = {}
    where_of: dict[str, str] = {}
    for key in MASKS:
        if key not in sets:
            out[key] = np.zeros(y.shape[0], dtype=bool)
            continue
        mask, where = sets[key]
        unlabelled = np.flatnonzero(mask & (y < 0))
        if unlabelled.size:
            raise DatasetError(
                f"{where} selects node {int(unlabelled[0])}, which is unlabelled (label -1) "
                f"({unlabelled.size} such nodes); a split holds labelled nodes only"
            )
        for other, prev in out.items():
            both = np.flatnonzero(mask & prev)
            if both.size:
                raise DatasetError(
                    f"{where} and {where_of[other]} both select node {int(both[0])} "
                    f"({both.size} nodes in common); the splits must be disjoint"
                )
        out[key] = mask
        where_of[key] = where
    return out


def load_mask_files(
    masks: Mapping[str, str | os.PathLike[str]], y: np.ndarray
) -> dict[str, np.ndarray]:
    """The split masks from ``.npy`` files: bool (or 0/1) ``[N]``, disjoint, labelled nodes only.

    Args:
        masks: ``{"train_mask": path, ...}``; a mask not given is empty.
        y: int ``[N]`` labels, ``-1`` = unlabelled.

    Returns:
        The three masks, bool ``[N]``.

    Raises:
        DatasetError: One line naming the file: not a 1-D bool / 0-1 array of length ``N``,
            selecting unlabelled nodes, or overlapping another mask.
    """
    n = y.shape[0]
    sets: dict[str, tuple[np.ndarray, str]] = {}
    for key in MASKS:
        if key not in masks:
            continue
        path = masks[key]
        m = load_npy(path, f"{key} file")
        if m.ndim == 2 and m.shape[1] == 1:
            m = m[:, 0]
        if m.ndim != 1 or m.dtype.kind not in "biu":
            raise DatasetError(
                f"{key} '{path}' must be a 1-D bool or 0/1 integer array of length {n} "
                f"(got {m.dtype} {m.shape}); save one with np.save(path, mask)"
            )
        if m.shape[0] != n:
            raise DatasetError(
                f"{key} '{path}' has {m.shape[0]} entries but the graph has {n} nodes; give "
                f"one entry per node"
            )
        if m.dtype.kind != "b":
            bad = np.flatnonzero((m != 0) & (m != 1))
            if bad.size:
                i = int(bad[0])
                raise DatasetError(
                    f"{key} '{path}' holds {m[i]} at node {i}; a mask holds only 0/1 or True/False"
                )
        sets[key] = (np.asarray(m != 0, dtype=bool), f"{key} '{path}'")
    return _check_sets(sets, y)


def load_split_file(path: str | os.PathLike[str], y: np.ndarray) -> dict[str, np.ndarray]:
    """The split from one file holding all three sets (``.npz`` or ``.json``, see the module).

    In a ``.npz`` a bool array is a mask and an integer array lists node IDs; in a ``.json``
    a list of ``true``/``false`` is a mask and a list of integers lists node IDs. A mask has one
    entry per node; IDs are in ``[0, N)`` and appear once. ``train`` is required.

    Sizes are checked before the data is read: an ``.npz`` array whose header declares more
    than ``N`` entries, or a ``.json`` file larger than a split of ``N`` nodes can be, is refused.

    Args:
        path: The split file.
        y: int ``[N]`` labels, ``-1`` = unlabelled.

    Returns:
        ``{"train_mask": ..., "val_mask": ..., "test_mask": ...}``, disjoint bool ``[N]``.

    Raises:
        DatasetError: One line naming the file and the set: an unknown suffix or key, a missing
            ``train``, a damaged file, a mask of the wrong length, an ID out of range or
            repeated, sets that overlap or select unlabelled nodes.
    """
    p = require_file(Path(path), "split file")
    n = int(y.shape[0])
    suffix = p.suffix.lower()
    if suffix == ".npz":
        raw = _read_split_npz(p, n)
    elif suffix == ".json":
        raw = _read_split_json(p, n)
    else:
        raise DatasetError(
            f"split file '{p}' must be a .npz (arrays train, val, test) or a .json file "
            f'({{"train": [...], "val": [...], "test": [...]}}) (got suffix {p.suffix!r})'
        )
    unknown = [k for k in raw if k not in SPLIT_KEYS]
    if unknown:
        raise DatasetError(
            f"split file '{p}' holds {unknown[0]!r}; its keys are train, val and test (got "
            f"{', '.join(map(repr, raw))})"
        )
    if "train" not in raw:
        raise DatasetError(
            f"split file '{p}' has no 'train' set (got {', '.join(map(repr, raw)) or 'nothing'}); "
            f"a split without training nodes cannot train"
        )
    sets = {
        f"{k}_mask": (_as_mask(raw[k], n, f"split file '{p}': '{k}'"), f"split file '{p}': '{k}'")
        for k in SPLIT_KEYS
        if k in raw
    }
    return _check_sets(sets, y)


def _as_mask(arr: np.ndarray, n: int, where: str) -> np.ndarray:
    """A bool mask of length ``n`` from a mask or an array of node IDs (checked)."""
    if arr.ndim != 1 or arr.dtype.kind not in "biu":
        raise DatasetError(
            f"{where} must be a 1-D bool mask of {n} entries or an integer array of node IDs "
            f"(got {arr.dtype} {arr.shape})"
        )
    if arr.dtype.kind == "b":
        if arr.shape[0] != n:
            raise DatasetError(
                f"{where} is a mask of {arr.shape[0]} entries but the graph has {n} nodes; give "
                f"one entry per node (or node IDs as integers)"
            )
        return arr.astype(bool, copy=True)
    ids = arr.astype(np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= n))
    if bad.size:
        raise DatasetError(
            f"{where} holds node ID {int(ids[bad[0]])}, outside [0, {n}) ({bad.size} such IDs); "
            f"IDs are 0-based node numbers"
        )
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    if int(mask.sum()) != ids.size:
        seen = np.zeros(n, dtype=np.int64)
        np.add.at(seen, ids, 1)
        dup = int(np.flatnonzero(seen > 1)[0])
        raise DatasetError(
            f"{where} lists node {dup} more than once; each ID appears once (a 0/1 mask must be "
            f"stored as bool, an integer array lists node IDs)"
        )
    return mask


def _read_split_npz(p: Path, n: int) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` split file, each header checked before its data is read."""
    try:
        with zipfile.ZipFile(p) as zf:
            members = zf.namelist()
            for member in members:
                shape, _fortran, dtype = npy_header(zf, member)
                key = member.removesuffix(".npy")
                count = int(np.prod(shape, dtype=object)) if shape else 1
                if count > n:
                    raise DatasetError(
                        f"split file '{p}': '{key}' declares {count} entries ({dtype} "
                        f"{tuple(shape)}) but the graph has {n} nodes; a set holds at most one "
                        f"entry per node"
                    )
            bad = zf.testzip()
            if bad is not None:
                raise DatasetError(
                    f"split file '{p}': member {bad!r} fails its CRC check; the file is corrupt"
                )
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FleetgnnError:
        raise
    except (*READ_ERRORS, ValueError, KeyError, zipfile.LargeZipFile) as e:
        raise DatasetError(
            f"split file '{p}' cannot be read as an .npz of arrays ({type(e).__name__}: {e}); "
            f"it is truncated or corrupt, or holds Python objects (refused: pickle is disabled); "
            f"save it with np.savez(path, train=..., val=..., test=...)"
        ) from e


def _read_split_json(p: Path, n: int) -> dict[str, np.ndarray]:
    """The lists of a ``.json`` split file as arrays (bool masks or int64 IDs)."""
    limit = len(SPLIT_KEYS) * n * _JSON_BYTES_PER_ENTRY + _JSON_SLACK
    try:
        size = p.stat().st_size
        if size > limit:
            raise DatasetError(
                f"split file '{p}' is {size} bytes, more than a split of {n} nodes can take "
                f"(at most {limit}); is it the right file?"
            )
    except OSError as e:
        raise DatasetError(f"split file '{p}' cannot be read ({e.strerror or e})") from None
    fix = 'write it as {"train": [...], "val": [...], "test": [...]}'
    # bounded: a regular file (never a FIFO or device), UTF-8, one line on bad JSON
    obj = load_json_file(p, "split file", max_bytes=limit, error=DatasetError, fix=fix)
    if not isinstance(obj, dict):
        raise DatasetError(
            f"split file '{p}' must hold a JSON object "
            f'{{"train": [...], "val": [...], "test": [...]}} (got {type(obj).__name__})'
        )
    out: dict[str, np.ndarray] = {}
    for key, value in obj.items():
        where = f"split file '{p}': {key!r}"
        if not isinstance(value, list):
            raise DatasetError(
                f"{where} must be a list of node IDs or of {n} booleans (got "
                f"{type(value).__name__})"
            )
        if all(type(v) is bool for v in value) and value:
            out[key] = np.array(value, dtype=bool)
        elif all(type(v) is int for v in value):
            big = next((v for v in value if not -(2**63) <= v < 2**63), None)
            if big is not None:
                raise DatasetError(f"{where} holds node ID {big}, outside [0, {n})")
            out[key] = np.array(value, dtype=np.int64)
        else:
            odd = next((v for v in value if type(v) not in (bool, int)), None)
            kind = "mixes booleans and integers" if odd is None else f"holds {odd!r}"
            raise DatasetError(
                f"{where} {kind}; a set is a list of node IDs (integers) or of {n} booleans"
            )
    return out


def split_masks(
    y: np.ndarray,
    masks: Mapping[str, str | os.PathLike[str]],
    split_file: str | os.PathLike[str] | None,
    num_train_per_class: int | None = None,
    num_val: int | None = None,
    num_test: int | None = None,
    split_seed: int | None = None,
    *,
    labels_hint: str = "labels (--labels)",
) -> dict[str, np.ndarray]:
    """``train_mask``/``val_mask``/``test_mask``: the user's own split, else a random one.

    The user's split comes from :func:`user_split`; without one, :func:`random_split` with its
    defaults (20 per class, 500, 1000, seed 0) for the arguments left ``None``.
    """
    own = user_split(y, masks, split_file, labels_hint=labels_hint)
    if own is not None:
        return own
    train, val, test = random_split(
        y,
        20 if num_train_per_class is None else num_train_per_class,
        500 if num_val is None else num_val,
        1000 if num_test is None else num_test,
        0 if split_seed is None else split_seed,
    )
    return {"train_mask": train, "val_mask": val, "test_mask": test}
