"""Partition layer: partition books, partitioners (streaming LDG too), quality metrics, chunks."""

from fleetgnn.partition.book import PartitionBook, book_dir
from fleetgnn.partition.chunks import (
    ChunkBook,
    chunk_partition,
    contiguous_partition,
    two_level_partition,
)
from fleetgnn.partition.methods import (
    BALANCE_CRITERIA,
    METHODS,
    balanced_boundaries,
    hash_partition,
    metis_adjacency,
    metis_memory,
    metis_partition,
    partition,
    random_partition,
    range_partition,
)
from fleetgnn.partition.quality import PartitionQuality, evaluate
from fleetgnn.partition.stream import ldg_partition

__all__ = [
    "BALANCE_CRITERIA",
    "METHODS",
    "ChunkBook",
    "PartitionBook",
    "PartitionQuality",
    "balanced_boundaries",
    "book_dir",
    "chunk_partition",
    "contiguous_partition",
    "evaluate",
    "hash_partition",
    "ldg_partition",
    "metis_adjacency",
    "metis_memory",
    "metis_partition",
    "partition",
    "random_partition",
    "range_partition",
    "two_level_partition",
]
