"""DVRP actor-critic: on a CPU the encoder skips each row's trailing undecided customers; the context and its
gradients must be those of the padded computation (every customer a token), whatever the rows' extents."""

from __future__ import annotations

import pytest
import torch

from envs.dvrp import DVRPConfig
from modules.dvrp_actor_critic import DVRPActorCritic

KEYS = ["customers", "request", "vehicles", "depot"]


def _collected(steps: int = 20, num_envs: int = 16) -> dict[str, torch.Tensor]:
    """Observations of ``steps`` env steps (random allowed actions), rows ``[steps * num_envs]``: extents 0..steps-1."""
    env = DVRPConfig(num_customers=20, num_vehicles=2, max_shift=2).make(num_envs=num_envs, seed=3)
    generator = torch.Generator().manual_seed(0)
    td, rows = env.reset(), []
    for _ in range(steps):
        rows.append(td.select(*KEYS, "offers").clone())
        td["action"] = torch.multinomial(td["action_mask"].float(), 1, generator=generator).squeeze(-1)
        _, td = env.step_and_maybe_reset(td)
    return torch.stack(rows).reshape(-1).to_dict()


def _network() -> DVRPActorCritic:
    torch.manual_seed(0)
    return DVRPActorCritic(embed_dim=16, num_heads=2, num_layers=2, hidden_dim=32)


def _outputs_and_grads(net: DVRPActorCritic, obs: dict, encode) -> tuple[torch.Tensor, list[torch.Tensor]]:
    net.zero_grad()
    hidden = encode(*(obs[k] for k in KEYS))
    (net.policy(hidden, obs["offers"]).square().sum() + net.value(hidden).sum()).backward()
    return hidden.detach(), [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("shuffle", [False, True])
def test_encoding_without_trailing_undecided_customers_equals_the_padded_encoding(shuffle):
    obs = _collected()
    if shuffle:  # a PPO minibatch: rows of every step mixed
        order = torch.randperm(len(obs["depot"]), generator=torch.Generator().manual_seed(1))
        obs = {k: v[order] for k, v in obs.items()}
    net = _network()
    net.encode(*(obs[k][:1] for k in KEYS))  # lazy layers take their shapes
    padded, padded_grads = _outputs_and_grads(net, obs, net._encode)
    grouped, grouped_grads = _outputs_and_grads(net, obs, net.encode)
    torch.testing.assert_close(grouped, padded, rtol=1e-5, atol=1e-6)
    for a, b in zip(grouped_grads, padded_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_grouping_handles_gaps_lead_dimensions_and_single_rows():
    """Undecided customers inside a row (not only trailing), rows with no decided customer, every customer
    decided, a ``[T, B]`` batch and one row: the same context as the padded computation."""
    obs = _collected(steps=20, num_envs=4)
    customers = obs["customers"].clone()
    unseen = torch.zeros(customers.shape[-1])
    unseen[-3] = 1.0
    customers[5, 2] = unseen  # a gap before the row's last decided customer
    customers[7, :] = unseen  # nothing decided
    customers[9, :, -3:] = torch.tensor([0.0, 1.0, 0.0])  # every customer decided (served)
    obs["customers"] = customers
    net = _network()
    flat = net._encode(*(obs[k] for k in KEYS))
    with torch.no_grad():
        torch.testing.assert_close(net.encode(*(obs[k] for k in KEYS)), flat, rtol=1e-5, atol=1e-6)
        lead = net.encode(*(obs[k].reshape(20, 4, *obs[k].shape[1:]) for k in KEYS))
        torch.testing.assert_close(lead, flat.reshape(20, 4, -1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(net.encode(*(obs[k][9:10] for k in KEYS)), flat[9:10], rtol=1e-5, atol=1e-6)
        assert net.encode(*(obs[k][:0] for k in KEYS)).shape == (0, 32)


def test_grouping_reads_fewer_customers_and_traces_static():
    """The grouped path really drops customers (a row at step 0 is encoded with 6 of 20), and a traced encoder
    keeps every customer, so an exported policy is right for any extent."""
    obs = _collected(steps=20, num_envs=2)
    net = _network()
    net.policy(net.encode(*(obs[k][:2] for k in KEYS)), obs["offers"][:2])  # lazy layers take their shapes
    seen: list[int] = []
    hook = net.customer_embed.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[-2]))
    net.encode(*(obs[k][:2] for k in KEYS))
    assert seen == [6]  # extent 0: depot, request and 6 customers fill a block of 8 tokens
    seen.clear()
    net.encode(*(obs[k] for k in KEYS))
    assert sorted(seen) == [6, 14, 20]
    seen.clear()
    traced = torch.jit.trace_module(net, {"encode": tuple(obs[k][:2] for k in KEYS)}, check_trace=False).encode
    assert [int(length) for length in seen] == [20]
    hook.remove()
    torch.testing.assert_close(traced(*(obs[k][-2:] for k in KEYS)), net._encode(*(obs[k][-2:] for k in KEYS)))
