"""The one table of synthetic presets, of every kind, and :func:`spec_for`.

A preset's spec says which generator writes it:

================================  =============================  ===============================
kind (spec)                       presets                        generator
================================  =============================  ===============================
:class:`SyntheticSpec`            ``tiny`` .. ``papers-like``    :mod:`.homogeneous`
:class:`TemporalSpec`             ``temporal-like``              :mod:`.temporal`
:class:`TypedSyntheticSpec`       ``mag-like``, ``igbh-like``,   :mod:`.typed`
                                  ``mag-temporal-like``
================================  =============================  ===============================
"""

from __future__ import annotations

import dataclasses

from fleetgnn.errors import DatasetError
from fleetgnn.graph.synthetic.common import is_real
from fleetgnn.graph.synthetic.homogeneous import SyntheticSpec
from fleetgnn.graph.synthetic.temporal import TemporalSpec
from fleetgnn.graph.synthetic.typed import TypedSyntheticSpec

__all__ = ["PRESETS", "Spec", "spec_for"]

#: A spec of any kind; its class picks the generator.
Spec = SyntheticSpec | TemporalSpec | TypedSyntheticSpec


def _preset(
    name: str,
    size: tuple[int, int, int, int],
    split: tuple[float, float, float],
    **statistics: float,
) -> SyntheticSpec:
    """A preset's spec: ``size`` = (nodes, edges, features, classes), ``split`` its fractions."""
    n, e, f, c = size
    return SyntheticSpec(n, e, f, c, *split, name=name, **statistics)  # type: ignore[arg-type]


#: ogbn-mag's schema and sizes: 736,389 papers (128 features, 349 venues as classes), 1,134,649
#: authors, 8,740 institutions, 59,965 fields of study (no features: learnable embeddings),
#: 5,416,271 cites, 7,145,660 writes, 1,043,998 affiliated_with, 7,505,078 has_topic edges;
#: its time split holds 629,571 / 64,879 / 41,939 papers.
_MAG = TypedSyntheticSpec(
    node_types=(
        ("paper", 736_389, 128),
        ("author", 1_134_649, 0),
        ("institution", 8_740, 0),
        ("field_of_study", 59_965, 0),
    ),
    relations=(
        ("author", "affiliated_with", "institution", 1_043_998),
        ("author", "writes", "paper", 7_145_660),
        ("paper", "cites", "paper", 5_416_271),
        ("paper", "has_topic", "field_of_study", 7_505_078),
    ),
    target="paper",
    num_classes=349,
    train_frac=0.855,
    val_frac=0.088,
    test_frac=0.057,
    homophily=0.8,
    feature_noise=6.0,
    label_noise=0.1,
    name="mag-like",
)

#: IGBH's schema (paper, author, institute, fos; cites, written_by, affiliated_to, topic; the
#: journal and conference types of its large and full releases are left out), features on every
#: type (IGBH: 1024 wide, here 128 to keep the preset light) and 19 classes, as IGBH's coarse
#: labels; sizes in IGBH-tiny's order of magnitude (100k papers). Its target type and its
#: homophily, feature noise and label noise are mag-like's.
_IGBH = dataclasses.replace(
    _MAG,
    node_types=(
        ("paper", 100_000, 128),
        ("author", 357_041, 128),
        ("institute", 8_738, 128),
        ("fos", 84_220, 128),
    ),
    relations=(
        ("paper", "cites", "paper", 547_416),
        ("paper", "written_by", "author", 471_443),
        ("author", "affiliated_to", "institute", 325_410),
        ("paper", "topic", "fos", 718_445),
    ),
    num_classes=19,
    train_frac=0.6,
    val_frac=0.2,
    test_frac=0.2,
    name="igbh-like",
)

PRESETS: dict[str, Spec] = {
    # for tests: 1k nodes, 10k edges
    "tiny": _preset("tiny", (1_000, 10_000, 16, 4), (0.6, 0.2, 0.2), feature_noise=3.0),
    # the embedded default of `fleetgnn train`: trains in seconds on two CPU cores; few labels and
    # noisy features, so the default run visibly climbs over its 10 epochs instead of starting
    # saturated
    "small": _preset(
        "small",
        (20_000, 400_000, 64, 8),
        (0.1, 0.1, 0.8),
        homophily=0.7,
        feature_noise=6.0,
        label_noise=0.1,
        class_skew=0.5,
    ),
    # the shape of ogbn-products (2,449,029 nodes, 61,859,140 directed edges; its split is
    # 196,615 / 39,323 / 2,213,091 nodes = 8.03% / 1.61% / 90.37%), as hard as it (GraphSAGE
    # ~0.79 test accuracy, an MLP ~0.61): features alone name the community of ~75% of the
    # nodes, the graph nearly all of them, and 22% of the labels are redrawn from the Zipf-like
    # class distribution (best accuracy ~0.80)
    "products-like": _preset(
        "products-like",
        (2_449_029, 61_859_140, 100, 47),
        (0.0803, 0.0161, 0.9036),
        feature_noise=2.8,
        label_noise=0.22,
        class_skew=1.0,
    ),
    # the shape of ogbn-papers100M (111,059,956 nodes, 1,615,685,872 edges; 1,207,179 / 125,265 /
    # 214,338 labelled split nodes = 1.09% / 0.11% / 0.19%), as hard as it (GraphSAGE ~0.67, an
    # MLP ~0.47): best accuracy ~0.69
    "papers-like": _preset(
        "papers-like",
        (111_059_956, 1_615_685_872, 128, 172),
        (0.0109, 0.00113, 0.00193),
        homophily=0.6,
        feature_noise=3.0,
        label_noise=0.33,
        class_skew=1.0,
    ),
    # an interaction stream (users and items, messages, transactions): 1M nodes, 20M edges over
    # 1000 time steps, half of the nodes changing community once
    "temporal-like": TemporalSpec(
        base=_preset(
            "temporal-like",
            (1_000_000, 20_000_000, 64, 16),
            (0.6, 0.2, 0.2),
            feature_noise=3.0,
            label_noise=0.05,
            class_skew=0.5,
        ),
        num_times=1000,
        phases=4,
        drift=0.5,
    ),
    "mag-like": _MAG,
    "igbh-like": _IGBH,
    # mag-like with node and edge times (uniform over 100 steps, e.g. years): the arrays of
    # mag-like plus the times (see :mod:`.typed`)
    "mag-temporal-like": dataclasses.replace(_MAG, time_horizon=100, name="mag-temporal-like"),
}


def spec_for(preset: str, scale: float = 1.0) -> Spec:
    """The spec of a named preset of any kind, with its sizes scaled linearly.

    Nodes and edges (of every type and relation) are multiplied by ``scale``; features, classes,
    split fractions, statistics and times are unchanged. The name gets a ``@scale`` suffix when
    ``scale != 1``.

    Args:
        preset: One of :data:`PRESETS`.
        scale: Size factor (> 0).

    Returns:
        The (scaled) spec: a :class:`SyntheticSpec`, :class:`TemporalSpec` or
        :class:`TypedSyntheticSpec`, as the preset's kind.

    Raises:
        DatasetError: Unknown preset, a non-positive scale, or one so small that a homogeneous
            preset keeps fewer than 2 nodes.
    """
    if preset not in PRESETS:
        raise DatasetError(
            f"unknown synthetic preset {preset!r}; valid presets: {', '.join(PRESETS)}"
        )
    if not is_real(scale) or float(scale) <= 0.0:
        raise DatasetError(
            f"'scale' must be a finite number > 0 (got {scale!r}); 1.0 keeps the preset's size "
            f"(valid presets: {', '.join(PRESETS)})"
        )
    base = PRESETS[preset]
    return base if float(scale) == 1.0 else base.scaled(preset, float(scale))
