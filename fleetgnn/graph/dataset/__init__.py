"""Datasets on disk: a directory of ``.npy`` arrays plus ``meta.json``, opened as memory maps.

One package for both kinds of dataset: a homogeneous graph (one node type, one relation) and a
typed (heterogeneous) one share the writer, the ``meta.json`` checks, the value checks and their
stamp, the compact feature rows, the times and the opener; the typed layout adds only its array
names, its schema and the checks of one CSC per relation. It is a package rather than one module
because those three stages are each a concept of their own, read and changed apart:
:mod:`~fleetgnn.graph.dataset.meta` (the format's constants, ``meta.json`` reading and checks),
:mod:`~fleetgnn.graph.dataset.writer` (:class:`DatasetWriter`, :func:`write_dataset`, the atomic
replace) and :mod:`~fleetgnn.graph.dataset.reader` (:func:`open_dataset`, the value check and its
stamp); the names below are the package's. ``meta.json``'s ``kind`` says which
layout a directory holds, and :func:`open_dataset` returns a :class:`~fleetgnn.graph.csc.Graph`
or a :class:`~fleetgnn.graph.hetero.HeteroGraph` from it.

Homogeneous layout (format version 1; ``kind`` absent or ``"graph"``)::

    DIR/meta.json        {"format_version": 1, "name", "num_nodes", "num_edges", "num_features",
                          "num_classes", "arrays": {name: {"dtype", "shape"}}, ...}
    DIR/indptr.npy       int64 [N + 1]   CSC offsets
    DIR/indices.npy      int32/int64 [E] in-neighbours, grouped by destination
    DIR/x.npy            float [N, F]    (optional; or compact: see below)
    DIR/y.npy            int64 [N]       (optional, -1 = unlabelled)
    DIR/{train,val,test}_mask.npy  bool [N]  (optional)
    DIR/node_time.npy    int64 [N]       (optional) node times >= 0 (when each label is asked)
    DIR/edge_weight.npy  float [E]       (optional)
    DIR/edge_attr.npy    float [E, D]    (optional) edge features, row e for edge e
    DIR/edge_time.npy    int64 [E]       (optional) edge times >= 0, sorted within each node's
                                         in-edges (see fleetgnn.graph.edge_time)
    DIR/verified.json    {"check_version", "files": {file: {"bytes", "mtime_ns", "sample"}}}

Typed layout (format version 1, ``"kind": "typed"``)::

    DIR/meta.json                     {"format_version": 1, "kind": "typed", "name",
                                       "schema": {"node_types", "num_nodes", "relations",
                                       "target"}, "num_nodes", "num_edges", "num_classes",
                                       "arrays": {name: {"dtype", "shape"}}, ...}
    DIR/rel/SRC.NAME.DST/indptr.npy   int64 [N_DST + 1]   CSC of relation (SRC, NAME, DST)
    DIR/rel/SRC.NAME.DST/indices.npy  int32/int64 [E_r]   sources, *type-local* IDs of SRC
    DIR/x/TYPE.npy                    float [N_TYPE, F_TYPE]  features (absent: featureless type)
    DIR/y.npy                         int64 [N_target]    labels of the target type (-1: none)
    DIR/{train,val,test}_mask.npy     bool [N_target]     splits of the target type
    DIR/rel/SRC.NAME.DST/edge_time.npy  int64 [E_r]       (optional, every relation or none) edge
                                                          times >= 0, sorted within each
                                                          destination's in-edges
    DIR/node_time/TYPE.npy            int64 [N_TYPE]      (optional, any node types) node times
    DIR/verified.json                 as a homogeneous dataset's

Type and relation names are letters, digits, ``_`` and ``-``
(:class:`~fleetgnn.graph.hetero.HeteroSchema`), so the dotted ``SRC.NAME.DST`` names one
relation unambiguously. A typed ``num_nodes`` / ``num_edges`` are the totals over types and
relations (the homogeneous view's ``N`` and ``E``).

``meta.json`` may also say ``"feature_norm"``: the transform the dataset's features customarily
get before training (``"row"`` for Planetoid's and gnn-benchmark's bag-of-words features, as in
the GCN paper's preprocessing), which ``fleetgnn train`` applies unless ``data.feature_norm`` says
otherwise. The key is optional: a dataset without it (any written before it existed) means
``"none"``, so the format version is unchanged. Likewise ``"has_edge_time"`` (``true`` when
edge times are there) and ``"edge_time_range"`` (``[min, max]``, over every relation of a typed
dataset, ``null`` without edges), written with every dataset that has edge times, and
``"has_node_time"`` / ``"node_time_range"`` (over every timed node type; ``null`` without
nodes) with every dataset that has node times; a dataset without them has none.

With ``"feature_dtype"`` (``prepare --feature-dtype``) ``x.npy`` holds compact rows and
``"feature_read_dtype"`` the float they read back as (:mod:`fleetgnn.graph.compact_rows`); a
typed dataset records both per type (``{TYPE: codec}``, ``{TYPE: float}``: one dtype for every
featured type, or ``TYPE=DTYPE,...``), and the types they do not name hold plain floats. The
stored rows are ``uint16 [N, F]`` bf16 bits, ``float16 [N, F]`` or ``uint8 [N, F + 4]``. A
reader without the keys refuses such a table in one line (``'x' must be a float array``,
``expected a float dtype``), except a float16 one, which it reads as the same values: the format
version is unchanged.

Writing goes through :class:`DatasetWriter`: arrays are created as ``.npy`` memory maps in a
temporary sibling directory (``.NAME.tmp-<pid>-<tag>-<random>``, so that a later run can sweep it
once its owner is gone: :mod:`fleetgnn.graph.files`), with their space reserved on disk first (a
full disk is a one-line :class:`~fleetgnn.errors.DiskFullError`, never a SIGBUS), and filled in
chunks; ``meta.json`` is written last, and the directory gets the user's umask and is renamed into
place, so an interrupted write never leaves a directory that looks complete.
Opening maps every array with ``np.load(mmap_mode='r')`` (constant time, paged on demand) after
checking that files, dtypes and shapes agree with ``meta.json``. Values are checked once, by
:meth:`DatasetWriter.commit` (streaming, :mod:`fleetgnn.graph.verify`), which records the files'
fingerprints in ``verified.json``; :func:`open_dataset` compares them and checks the values again
only for files that changed since (or a dataset without the record).
"""

from fleetgnn.durable import atomic_write_text, fsync_dir
from fleetgnn.graph.dataset.meta import (
    GRAPH_KIND,
    META,
    STAMP,
    TYPED_KIND,
    dataset_feature_norm,
    dataset_kind,
    read_json_meta,
    read_meta,
    relation_key,
    write_json_atomic,
)
from fleetgnn.graph.dataset.reader import (
    dataset_fingerprint,
    open_dataset,
    stamp_problem,
)
from fleetgnn.graph.dataset.writer import DatasetWriter, replace_dir, write_dataset

__all__ = [
    "GRAPH_KIND",
    "META",
    "STAMP",
    "TYPED_KIND",
    "DatasetWriter",
    "atomic_write_text",
    "dataset_feature_norm",
    "dataset_fingerprint",
    "dataset_kind",
    "fsync_dir",
    "open_dataset",
    "read_json_meta",
    "read_meta",
    "relation_key",
    "replace_dir",
    "stamp_problem",
    "write_dataset",
    "write_json_atomic",
]
