"""The GPU path's set-up and the compile options, checked on a CPU machine: networks are shaped on the CPU even when
Lightning's ``configure_model`` runs with another default device (as on ``--trainer.accelerator=gpu``), the env
specs are CPU specs whatever the env's device, ``model.compile`` gives the same loss and gradients as the eager
update, ``data.collector.compile_policy`` gives the eager policy's values, and bad compile settings are refused at
construction."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Binary, Bounded, Categorical, Composite, Unbounded

from envs import EnvSpecs
from envs.gym import GymConfig
from modules.dqn import DQNModule
from modules.q_networks import QNetwork
from modules.sac import SACModule, SACNetworks
from pipelines.data import CollectorOptions, OffPolicyDataModule, ReplayOptions


def _specs(action_spec, width: int) -> EnvSpecs:
    return EnvSpecs(action_spec, action_spec, TensorDict(observation=torch.zeros(2, width), batch_size=[2]), None)


@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_configure_model_builds_on_the_cpu_under_another_default_device(algorithm):
    """Lightning calls ``configure_model`` under the root device's default-device context (cuda on a GPU run): the
    networks, targets and temperature must still be built on the CPU, with the module, which Lightning then moves.
    The ``meta`` device stands in for cuda here: a tensor created on it would have no data."""
    if algorithm == "dqn":
        module, specs = DQNModule(QNetwork(2, (8,))), _specs(Categorical(2), 4)
    else:
        module, specs = SACModule(SACNetworks((8,), (8,))), _specs(Bounded(-2.0, 2.0, shape=(1,)), 3)
    module._trainer = SimpleNamespace(datamodule=SimpleNamespace(env_specs=lambda: specs))
    with torch.device("meta"):
        module.configure_model()
    tensors = dict(module.named_parameters()) | dict(module.named_buffers())
    assert tensors and {str(t.device) for t in tensors.values()} == {"cpu"}, \
        {k: str(t.device) for k, t in tensors.items() if t.device.type != "cpu"}


def test_env_specs_are_on_the_cpu_whatever_the_env_device():
    device = "meta"  # stands in for an env on cuda
    env = SimpleNamespace(action_spec_unbatched=Categorical(3, device=device),
                          observation_spec=Composite(observation=Unbounded((2, 5), device=device),
                                                     action_mask=Binary(3, shape=(2, 3), device=device),
                                                     shape=(2,), device=device))
    specs = EnvSpecs.of(env)
    assert specs.action_spec.device == torch.device("cpu")
    assert {t.device.type for t in specs.example_observation.values(True, True)} == {"cpu"}


def _transitions(n: int) -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    done = torch.rand(n, 1, generator=generator) < 0.2
    nxt = TensorDict(observation=torch.randn(n, 4, generator=generator), reward=torch.randn(n, 1, generator=generator),
                     done=done, terminated=done.clone(), batch_size=[n])
    return TensorDict(observation=torch.randn(n, 4, generator=generator),
                      action=torch.randint(2, (n,), generator=generator), next=nxt, batch_size=[n])


def _shifted(batch: TensorDict, offset: float) -> TensorDict:
    """``batch`` with ``offset`` added to every float entry."""
    return batch.apply(lambda x: x + offset if x.is_floating_point() else x)


def test_compiled_update_gives_the_eager_loss_and_gradients_on_cpu():
    """``model.compile: true`` on a CPU machine is harmless: the same loss, TD errors and gradients as the eager
    update (to float32 rounding) on the same batch."""
    results = []
    for compile in (False, True):
        torch.manual_seed(0)
        module = DQNModule(QNetwork(2, (32, 32), dueling=True), double_dqn=True, compile=compile,
                           compile_mode="default" if compile else None)
        module.build(Categorical(2), TensorDict(observation=torch.zeros(2, 4), batch_size=[2]))
        loss, td_error = module.update_loss(_transitions(64))
        loss.backward()
        results.append((loss.detach(), td_error.detach(), [p.grad.clone() for p in module.network.parameters()]))
    (loss, td, grads), (loss_c, td_c, grads_c) = results
    torch.testing.assert_close(loss_c, loss)
    torch.testing.assert_close(td_c, td)
    for g, g_c in zip(grads, grads_c, strict=True):
        torch.testing.assert_close(g_c, g)


def test_cuda_graph_modes_hand_out_copies_that_outlive_the_next_update(monkeypatch):
    """Under ``compile_mode: reduce-overhead`` a GPU's graph replay overwrites its outputs: ``update_loss`` starts
    a graph step per call and returns copies, so the TD errors of a training step's updates, stacked after the last
    one, are each update's own (on a CPU the mode compiles without graphs: the same values as eager)."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    results = []
    for compile in (False, True):
        torch.manual_seed(0)
        module = DQNModule(QNetwork(2, (32,)), compile=compile, compile_mode="reduce-overhead" if compile else None)
        module.build(Categorical(2), TensorDict(observation=torch.zeros(2, 4), batch_size=[2]))
        outputs = [module.update_loss(_shifted(_transitions(64), k)) for k in range(3)]
        results.append(torch.stack([td_error.detach() for _, td_error in outputs]))
    assert len(marks) == 3
    torch.testing.assert_close(results[1], results[0])
    assert not torch.equal(results[1][0], results[1][1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(compile=True, compile_mode="fast"), "model.compile_mode='fast' is not allowed"),
    (dict(compile_mode="reduce-overhead"), "needs model.compile=true"),
])
def test_bad_compile_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DQNModule(QNetwork(2), **kwargs)


def test_compiled_collector_policy_gives_the_eager_values_on_cpu():
    """``data.collector.compile_policy: true`` on a CPU machine is harmless: TorchRL's collector runs the policy through
    ``torch.compile``, and the greedy actions it took on the collected observations are the eager network's."""
    torch.manual_seed(0)
    data = OffPolicyDataModule(GymConfig(env_id="CartPole-v1"),
                               CollectorOptions(num_envs=2, frames_per_batch=16, compile_policy=True),
                               ReplayOptions(init_random_frames=0), device="cpu")
    module = DQNModule(QNetwork(2, (32,)), epsilon=0.0)
    module.build(Categorical(2), TensorDict(observation=torch.zeros(2, 4), batch_size=[2]))
    with torch.no_grad():  # Q = relu(+-(pole angle + angular velocity)): both actions come up
        for p in module.network.parameters():
            p.zero_()
        module.network.trunk[0].weight[:2, 2:] = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
        module.network.advantage.weight[:, :2] = torch.eye(2)
    data.trainer = SimpleNamespace(lightning_module=module, global_rank=0, world_size=1)
    data.setup("fit")
    try:
        collector = data.collector()
        batch = next(iter(collector))
        assert collector.compiled_policy and not collector.cudagraphed_policy
        with torch.no_grad():
            greedy = module.network(batch["observation"]).argmax(-1)
        assert torch.equal(batch["action"], greedy) and len(greedy.unique()) == 2
    finally:
        data.shutdown_collector()


def test_collector_policy_options_are_refused_where_they_cannot_apply():
    with pytest.raises(ValueError, match=r"data\.collector\.compile_policy=true needs in-process envs "
                                         r"\(data\.collector\.workers: 0"):
        CollectorOptions(num_envs=2, frames_per_batch=16, workers=2, compile_policy=True)
    data = OffPolicyDataModule(GymConfig(env_id="CartPole-v1"),
                               CollectorOptions(num_envs=2, frames_per_batch=16, cudagraph_policy=True))
    with pytest.raises(ValueError, match=r"data\.collector\.cudagraph_policy=true needs a CUDA device .* got cpu"):
        data.check_device("cpu")
    data.check_device("cuda:0")  # (checked, not used: no CUDA needed)
