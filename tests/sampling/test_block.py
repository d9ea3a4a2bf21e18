import pytest
import torch

from fleetgnn.errors import GraphError
from fleetgnn.sampling import Block


def _block(**kw: object) -> Block:
    fields = dict(
        indptr=torch.tensor([0, 2, 3]),
        indices=torch.tensor([1, 2, 2]),
        src_ids=torch.tensor([7, 3, 9]),
        num_dst=2,
    )
    fields.update(kw)
    return Block(**fields)  # type: ignore[arg-type]


def test_properties_and_repr() -> None:
    b = _block(src_degree=torch.tensor([2.0, 1.0, 0.0]), edge_weight=torch.ones(3))
    assert (b.num_dst, b.num_src, b.num_edges) == (2, 3, 3)
    assert b.dst_ids.tolist() == [7, 3]
    assert b.dst_in_degree().tolist() == [2, 1]
    b.validate()
    r = repr(b)
    assert "num_dst=2" in r and "num_src=3" in r and "num_edges=3" in r and "edge_weight" in r


def test_frozen() -> None:
    b = _block()
    with pytest.raises(AttributeError):
        b.num_dst = 1  # type: ignore[misc]


def test_to_returns_new_block_with_same_values() -> None:
    b = _block(src_degree=torch.tensor([2.0, 1.0, 0.0]))
    c = b.to("cpu")
    assert c is not b
    assert torch.equal(c.indptr, b.indptr) and torch.equal(c.src_ids, b.src_ids)
    assert c.num_dst == b.num_dst and torch.equal(c.src_degree, b.src_degree)
    assert c.edge_weight is None


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(indptr=torch.tensor([0, 2, 3], dtype=torch.int32)), "int64"),
        (dict(indices=[1, 2, 2]), "torch.Tensor"),
        (dict(num_dst=4), r"\[0, num_src\]"),
        (dict(num_dst=1), "num_dst \\+ 1"),
        (dict(src_degree=torch.ones(2)), "src_degree"),
        (dict(src_degree=torch.ones(3, dtype=torch.int64)), "src_degree"),
        (dict(edge_weight=torch.ones(4)), "edge_weight"),
        (dict(num_dst=True), "int"),
    ],
)
def test_construction_rejects_bad_fields(kw: dict, match: str) -> None:
    with pytest.raises(GraphError, match=match):
        _block(**kw)


def test_validate_catches_bad_values() -> None:
    with pytest.raises(GraphError, match="local index 9"):
        _block(indices=torch.tensor([1, 9, 2])).validate()
    with pytest.raises(GraphError, match="from 0 to num_edges"):
        _block(indptr=torch.tensor([0, 2, 4])).validate()
    with pytest.raises(GraphError, match="non-decreasing"):
        _block(indptr=torch.tensor([0, 3, 1, 3]), src_ids=torch.arange(4), num_dst=3).validate()


def test_empty_block_is_valid() -> None:
    b = Block(
        indptr=torch.zeros(1, dtype=torch.int64),
        indices=torch.zeros(0, dtype=torch.int64),
        src_ids=torch.zeros(0, dtype=torch.int64),
        num_dst=0,
    )
    b.validate()
    assert (b.num_dst, b.num_src, b.num_edges) == (0, 0, 0)
