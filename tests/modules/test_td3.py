"""TD3: the actor and the targets move every ``policy_delay``-th update only, the critics every update; exploration
noise only under the collector's exploration type, inside the bounds; the Pendulum config runs, evaluates and
exports through the pipeline (and, marked slow, reaches its goal)."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical
from torchrl.envs import ExplorationType, set_exploration_type

from modules.td3 import TD3Module, TD3Networks
from pipelines.evaluate import main as evaluate
from pipelines.fit import main
from tests.pipelines.conftest import REPO

PENDULUM = str(REPO / "configs" / "pendulum_td3.yaml")
SMALL = ["--model.init_args.network.init_args.actor_hidden_dims=[32, 32]",
         "--model.init_args.network.init_args.critic_hidden_dims=[32, 32]"]


def _batch(k: int, n: int, spec: Bounded) -> TensorDict:
    nxt = TensorDict(observation=torch.randn(k, n, 3), reward=torch.randn(k, n, 1),
                     done=torch.zeros(k, n, 1, dtype=torch.bool), terminated=torch.zeros(k, n, 1, dtype=torch.bool),
                     batch_size=[k, n])
    return TensorDict(observation=torch.randn(k, n, 3), action=spec.rand((k, n)), next=nxt, batch_size=[k, n])


def _without_lightning(module: TD3Module) -> None:
    """What ``training_step`` needs of Lightning here: its optimiser, stepped straight by torch."""
    optimizer = module.configure_optimizers()
    module.optimizers = lambda: optimizer
    module.direct_update = lambda: True
    module._step = lambda opt, direct: opt.step()


def test_the_actor_and_the_targets_move_every_policy_delay_th_update():
    torch.manual_seed(0)
    spec = Bounded(-2.0, 2.0, shape=(1,))
    module = TD3Module(TD3Networks((16,), (16,)), policy_delay=3, tau=0.5)
    module.build(spec, TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
    _without_lightning(module)
    snapshots = []
    for _ in range(4):  # four training steps of one update each: the delay's clock runs across them
        batch = _batch(1, 32, spec)
        before = {name: p.detach().clone() for name, p in module.named_parameters()}
        targets = [p.clone() for p in [*module.target_actor.parameters(), *module.target_critics.parameters()]]
        module.training_step(batch, 0)
        moved = {name for name, p in module.named_parameters() if not torch.equal(p, before[name])}
        targets_moved = any(not torch.equal(p, q) for p, q in zip(
            [*module.target_actor.parameters(), *module.target_critics.parameters()], targets, strict=True))
        snapshots.append((module.critic_updates, any(n.startswith("network.actor") for n in moved),
                          {n.split(".")[2] for n in moved if n.startswith("critics.nets")}, targets_moved))
        assert batch["td_error"].shape == (1, 32, 1)
    assert [s[0] for s in snapshots] == [1, 2, 3, 4]
    assert [s[1] for s in snapshots] == [False, False, True, False]  # the actor on the 3rd update only
    assert all(s[2] == {"0", "1"} for s in snapshots)  # both critics every update
    assert [s[3] for s in snapshots] == [False, False, True, False]  # the targets with the actor
    trained = {id(p) for group in module.configure_optimizers().param_groups for p in group["params"]}
    assert not any(id(p) in trained for p in module.network.critic.parameters())  # the template is not trained
    module.training_step(_batch(3, 32, spec), 0)  # three updates in one training step: 5, 6 (the actor's), 7
    assert module.critic_updates == 7


def test_exploration_noise_only_while_collecting_and_inside_the_bounds():
    torch.manual_seed(0)
    spec = Bounded(torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]), shape=(2,))
    module = TD3Module(TD3Networks((16,), (16,)), exploration_noise=0.5)
    obs = TensorDict(observation=torch.randn(512, 3) * 5, batch_size=[512])
    module.build(spec, obs)
    policy = module.collector_policy
    with torch.no_grad():
        greedy = policy(obs.clone())["action"]
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert torch.equal(policy(obs.clone())["action"], greedy)
        with set_exploration_type(ExplorationType.RANDOM):
            noisy = policy(obs.clone())["action"]
    assert spec.is_in(greedy) and spec.is_in(noisy)
    assert not torch.equal(noisy, greedy)
    spread = (noisy - greedy)[(greedy > spec.space.low + 0.5) & (greedy < spec.space.high - 0.5)]
    assert 0.05 < spread.std() < 1.0  # about 0.5 x the half range (2 and 0.5) where the bounds do not clip


def test_unsupported_action_spec_and_settings_are_rejected():
    module = TD3Module(TD3Networks((8,), (8,)))
    with pytest.raises(ValueError, match="bounded continuous"):
        module.build(Categorical(3), TensorDict(observation=torch.zeros(1, 3), batch_size=[1]))
    with pytest.raises(ValueError, match="model.policy_delay"):
        TD3Module(TD3Networks(), policy_delay=0)
    with pytest.raises(ValueError, match="model.loss_function"):
        TD3Module(TD3Networks(), loss_function="huber")


def test_pendulum_config_runs_evaluates_and_exports(tmp_path, capsys):
    args = ["--config", PENDULUM, "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            "--trainer.callbacks+=callbacks.ModelCheckpoint", "--trainer.callbacks.save_last=true", *SMALL,
            "--data.init_args.replay_buffer.init_random_frames=104", f"--trainer.logger.init_args.save_dir={tmp_path}"]
    cli = main([*args, "--data.init_args.total_frames=400"])
    assert cli.trainer.global_step == (400 - 104) // 8 * 8 and cli.model.critic_updates == 296
    assert set(cli.model.latest_metrics) >= {"train/loss_actor", "train/loss_qvalue", "train/grad_norm"}
    last = tmp_path / "pendulum_td3" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["rl_state"]["critic_updates"] == 296
    capsys.readouterr()
    table = evaluate(["--ckpt_path", str(last), "--episodes", "4", "--num_envs", "4"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == table
    assert set(table) == {"td3", "random"} and -2000 < table["random"]["mean_return"] < 0
    from pipelines.export import main as export

    export(["--ckpt_path", str(last), "--out", str(tmp_path / "td3.pt")])
    program = torch.jit.load(str(tmp_path / "td3.pt"))
    observation = torch.randn(5, 3)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        expected = cli.model.policy(observation)
    assert torch.allclose(program(observation), expected, atol=1e-6)


@pytest.mark.slow
def test_pendulum_config_reaches_its_goal(tmp_path):
    """The full config (20,000 frames, about 3 min on 1 thread): greedy return above -200."""
    cli = main(["--config", PENDULUM, "--trainer.enable_progress_bar=false",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--trainer.callbacks=[]", "--trainer.callbacks+=callbacks.PolicyEvaluation",
                "--trainer.callbacks.every_n_frames=4000", "--trainer.callbacks.num_envs=10"])
    evaluation = next(c for c in cli.trainer.callbacks if type(c).__name__ == "PolicyEvaluation")
    assert evaluation.evaluate(cli.trainer, cli.model)["eval/episode_return"] > -200
