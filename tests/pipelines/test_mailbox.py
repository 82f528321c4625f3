"""The learner-to-worker mailbox: posts reach a copy pickled into another process's view of the file, one
post at a time and in order; oversized posts and misshapen per-row calls are rejected."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from pipelines.mailbox import EnvCalls, Mailbox, apply_calls


def test_a_post_reaches_the_pickled_copy():
    mailbox = Mailbox(capacity=1 << 16)
    worker = pickle.loads(pickle.dumps(mailbox))  # what a worker process unpickles: the same file, mapped again
    assert worker.version == 0
    mailbox.post([("configure", (), {"mode": "TRAIN_DEFENSE"})])
    assert worker.version == 1 and worker.read() == [("configure", (), {"mode": "TRAIN_DEFENSE"})]
    weights = {"weight": torch.arange(6.0).reshape(2, 3)}
    mailbox.post([("load_state_dict", (weights,), {})])
    assert worker.version == 2 and torch.equal(worker.read()[0][1][0]["weight"], weights["weight"])
    with pytest.raises(ValueError, match="exceed the worker mailbox"):
        mailbox.post([("load_state_dict", (torch.zeros(1 << 15),), {})])
    mailbox.close()


def test_calls_are_split_by_worker_rows_and_made_on_a_dotted_path():
    calls = EnvCalls(workers=2, rows_per_worker=3)
    calls.call("configure", w_touch=1.0)
    calls.call_rows("set_opponent", ["weak", "strong", "policy", "static", "weak", "weak"])
    assert calls.take(1) == [("configure", (), {"w_touch": 1.0}), ("set_opponent", (["static", "weak", "weak"],), {})]
    assert len(calls.take(0)) == 2 and calls.take(0) == []
    with pytest.raises(ValueError, match="got 2 values for 6 env rows"):
        calls.call_rows("set_opponent", ["weak", "weak"])

    class Env:  # a base env whose config holds a model (like the DVRP env's embedding model)
        class config:
            embedding_model = nn.Linear(2, 1)

    new = {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}
    apply_calls(Env(), [("config.embedding_model.load_state_dict", (new,), {})])
    assert torch.equal(Env.config.embedding_model.weight, new["weight"])
