"""Fixtures of the nn tests (the graph helpers live in nn_graphs, importable by name)."""

import pytest
import torch
from nn_graphs import random_graph

from fleetgnn.nn import LocalAggregator


@pytest.fixture
def graph():
    return random_graph()


@pytest.fixture
def full_agg(graph):
    return LocalAggregator.from_graph(graph, dtype=torch.float64)
