"""``launch.release_graphs``: the engine's graph holders drop their CUDA graphs (each in its own ``release_graphs()``)
before the NCCL group is torn down -- on CPU with stand-in graph objects, checking that the last reference is gone."""
from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import torch

from modelgen.runtime.block_manager import BlockManager
from modelgen.runtime.parallel.launch import DriverRunner, release_graphs
from modelgen.runtime.targets.rocm.runner import RocmRunner


class _Graphs:
    """Stands in for DecodeGraphs (a CUDA graph needs a GPU); a cycle makes it need gc.collect() to go, as captured
    graphs referencing their static buffers and the model can."""

    def __init__(self):
        self.me = self


def _rocm_runner() -> RocmRunner:
    runner = RocmRunner(torch.nn.Linear(2, 2), BlockManager(4, 16), torch.device("cpu"))
    assert runner.graphs is None  # no GPU kernels on CPU: the runner built none itself
    return runner


def _with_graphs(runner: RocmRunner) -> weakref.ref:
    graphs = _Graphs()
    runner.graphs = graphs
    return weakref.ref(graphs)


def test_rocm_runner_release_graphs_drops_its_decode_graphs():
    runner = _rocm_runner()
    ref = _with_graphs(runner)
    runner.release_graphs()
    assert runner.graphs is None
    gc.collect()
    assert ref() is None


def test_release_graphs_reaches_the_runner_behind_rank_0s_driver():
    inner = _rocm_runner()
    ref = _with_graphs(inner)
    driver = DriverRunner(inner, ranks=None, blocks=inner.blocks, state_pool=None)  # ranks unused: no broadcast
    release_graphs(SimpleNamespace(runner=driver, speculative=None))
    assert inner.graphs is None
    assert ref() is None  # release_graphs collected the cycle: nothing keeps the graph alive past the group


def test_release_graphs_on_a_follower_runner_and_the_speculative_decoder():
    runner = _rocm_runner()
    ref = _with_graphs(runner)
    released = []
    speculative = SimpleNamespace(release_graphs=lambda: released.append("speculative"))
    release_graphs(SimpleNamespace(runner=runner, speculative=speculative))
    assert ref() is None and released == ["speculative"]


def test_release_graphs_skips_holders_without_graphs():
    neuron_like = SimpleNamespace(graphs=object())  # no release_graphs(): not a graph holder, left alone
    release_graphs(SimpleNamespace(runner=neuron_like, speculative=None))
    assert neuron_like.graphs is not None
    release_graphs(SimpleNamespace())  # an engine that failed before it had a runner
