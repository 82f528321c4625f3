"""Deferred invariant checks (``envs.checks``): the GPU mode of the DVRP env, exercised on the CPU. Same
episodes as the checked mode, one host read per step, and every check still stops the step loop with its error."""

from __future__ import annotations

import pytest
import torch

from envs import make_env
from envs.checks import Checks
from envs.dvrp import DVRPConfig
from tests.envs.test_dvrp_env import MaskedRandom

READS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "nonzero")


def _dvrp(defer: bool, num_envs: int = 8, num_customers: int = 12):
    env = make_env(DVRPConfig(num_customers=num_customers), num_envs=num_envs, seed=3)
    env.checks.defer = defer  # what a GPU env sets (its oracle shares the env's checks)
    return env


def _play(env, steps: int):
    policy, td, out = MaskedRandom(seed=1), env.reset(), []
    for _ in range(steps):
        data, td = env.step_and_maybe_reset(policy(td))
        out.append(data)
    return torch.stack(out)


def test_deferred_mode_plays_the_same_episodes():
    """Two and a half episodes per row with resets: the GPU mode (the oracle prices over all positions, with no
    host read of the longest route) gives every observation, mask, cost and reward of the checked mode exactly."""
    checked, deferred = _play(_dvrp(False), 30), _play(_dvrp(True), 30)
    assert int(checked["next", "done"].sum()) == 2 * 8
    for key in checked.keys(True, True):
        assert torch.equal(checked[key], deferred[key]), key


def _count_reads(monkeypatch) -> list[str]:
    calls: list[str] = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


def test_one_host_read_per_step_when_deferred(monkeypatch):
    """Between resets a deferred step (the env, its oracle and TorchRL's done check) reads the device once:
    the checks and the done flags together. The checked mode reads it more often."""
    counts = {}
    for defer in (False, True):
        env = _dvrp(defer)
        policy, td = MaskedRandom(seed=1), env.reset()
        td = policy(td)
        calls = _count_reads(monkeypatch)
        for _ in range(5):
            _, td = env.step_and_maybe_reset(td)
            td["action"] = torch.full((8,), env.num_actions - 1)  # reject: always allowed
        counts[defer] = list(calls)
        monkeypatch.undo()
    assert counts[True] == ["tolist"] * 5
    assert len(counts[False]) > 2 * 5


def _masked_action(env, td):
    row, bad = (~td["action_mask"]).nonzero()[0].tolist()
    action = torch.full((env.batch_size[0],), env.num_actions - 1)
    action[row] = bad
    td["action"] = action
    return row


def test_deferred_action_mask_check_stops_the_step():
    """A masked action: the checked env raises before the step; the deferred one raises from the same
    ``step_and_maybe_reset`` call, naming the row."""
    env = _dvrp(False)
    _masked_action(env, td := env.reset())
    with pytest.raises(ValueError, match="action_mask"):
        env.step(td)
    env = _dvrp(True)
    row = _masked_action(env, td := env.reset())
    with pytest.raises(ValueError, match=rf"action_mask in rows \[{row}\]"):
        env.step_and_maybe_reset(td)


def test_deferred_finished_episode_check():
    """Stepping past the episode's end with ``step`` (no reset) is reported at the next done read, with the rows."""
    env = _dvrp(True, num_envs=2, num_customers=3)
    td = env.reset()
    for _ in range(3):
        td["action"] = torch.full((2,), env.num_actions - 1)
        td = env.step(td)["next"]
    td["action"] = torch.full((2,), env.num_actions - 1)
    out = env.step(td)  # past the end: deferred, no error yet
    with pytest.raises(RuntimeError, match=r"finished episode in rows \[0, 1\]"):
        env.any_done(out["next"])


def test_deferred_oracle_check():
    """The oracle's commit check goes through the env's checks: an accepted window that was not quoted feasible
    raises at the next read, not at the commit."""
    env = _dvrp(True, num_envs=4)
    env.reset()
    quote = env.oracle.quote(env.t, env.customers[:, 0, :2], env.customers[:, 0, 2], env.customers[:, 0, 3],
                             torch.zeros(4, 1, 2, dtype=env.dtype))  # a zero-length window at time 0
    assert not bool(quote.feasible.any())
    env.oracle.commit(torch.zeros(4, dtype=torch.long), torch.tensor([False, True, False, True]))
    with pytest.raises(ValueError, match=r"no feasible insertion in rows \[1, 3\]"):
        env.checks.read()


def test_checks_read_in_one_transfer_and_forget():
    checks = Checks(defer=True)
    checks("a", torch.tensor([False, False]), lambda bad: ValueError("a"))
    checks("a", torch.tensor([False, False]), lambda bad: ValueError("a"))
    assert checks.read(torch.tensor(True)) is True
    assert checks.read(torch.tensor(False)) is False and checks.read() is False
    checks("a", torch.tensor([True, False]), lambda bad: ValueError("first a"))
    checks("a", torch.tensor([False, True]), lambda bad: ValueError(f"a {bad.tolist()}"))  # OR-ed, last message
    with pytest.raises(ValueError, match=r"a \[True, True\]"):
        checks.read(torch.tensor(False))
    assert checks.read() is False  # forgotten after the raise
    with pytest.raises(KeyError):
        Checks(defer=False)("b", torch.tensor([True]), lambda bad: KeyError("b"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_dvrp_step_on_the_gpu_synchronises_once():
    """On CUDA the checks are deferred by default: between resets, each ``step_and_maybe_reset`` of the DVRP env
    waits for the device once (``torch.cuda.set_sync_debug_mode`` counts them), and a masked action still stops
    the step loop with its error."""
    import warnings

    env = make_env(DVRPConfig(num_customers=12), num_envs=8, seed=3, device="cuda")
    assert env.checks.defer
    reject = torch.full((8,), env.num_actions - 1, device="cuda")
    td = env.reset().set("action", reject)
    _, td = env.step_and_maybe_reset(td)  # (one step before counting: one-time set-up stays out of the count)
    td.set("action", reject)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        seen.clear()  # (torch's own warning on turning the mode on)
        try:
            for _ in range(5):
                _, td = env.step_and_maybe_reset(td)
                td.set("action", reject)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [f"{w.filename}:{w.lineno}" for w in seen if "synchroniz" in str(w.message)]
    assert len(syncs) == 5, syncs
    row = _masked_action(env, td)
    td["action"] = td["action"].cuda()
    with pytest.raises(ValueError, match=rf"action_mask in rows \[{row}\]"):
        env.step_and_maybe_reset(td)
