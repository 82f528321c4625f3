"""Host reads (what makes a GPU stream wait for the host), counted on a CPU machine with
``benchmarks.host_reads.HostReads``: an update of every algorithm reads nothing back, and an env step that starts
no episode reads at most once (its done flags, with the deferred invariant checks), on the code path a GPU takes.
The GPU's own count (``torch.cuda.set_sync_debug_mode``) is ``tests/pipelines/test_gpu_path.py``'s, on the device."""

from __future__ import annotations

import functools

import pytest
import torch

from benchmarks.host_reads import HostReads
from envs.dvrp import DVRPConfig
from envs.factory import make_env, unwrap
from envs.hockey import HockeyConfig
from envs.vacuum import VacuumConfig
from modules.base import RLModule
from pipelines.data import RLDataModule
from pipelines.fit import FitCLI
from tests.pipelines.conftest import REPO


def test_host_reads_counts_what_waits_for_the_host_and_nothing_else():
    x = torch.rand(8)
    with HostReads() as reads:
        y = (x * 2 + 1).softmax(0).cumsum(0)  # device work only
        torch.where(x > 0.5, x, y).index_select(0, torch.arange(3))
    assert reads.total == 0, reads.sites
    with HostReads() as reads:
        bool(x.any())
        x.sum().item()
        x.tolist()
        x[x > 0.5]
        (x > 0.5).nonzero()
        torch.tensor([1.0, 2.0])
    assert reads.total == 6, reads.ops
    assert sum(reads.sites.values()) == 6 and all(site.startswith("tests/") for site in reads.sites), reads.sites
    assert torch.Tensor.tolist(x) == x.tolist()  # the patch is gone after the block


RUNS = {"dqn": ["cartpole_dqn.yaml", "--data.init_args.total_frames=1024",
                "--data.init_args.replay_buffer.init_random_frames=256"],
        "sac": ["pendulum_sac.yaml", "--data.init_args.total_frames=600",
                "--data.init_args.replay_buffer.init_random_frames=400"],
        "ppo": ["cartpole_ppo.yaml", "--data.init_args.total_frames=1024"]}


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_an_update_reads_nothing_back(algorithm, tmp_path, monkeypatch):
    """Every ``training_step`` of a short CPU fit (all the updates of a collected batch) reads nothing back: no
    metric, no non-finite check, no optimiser state leaves the device inside an update."""
    monkeypatch.setattr("sys.argv", ["fit"])
    config, *extra = RUNS[algorithm]
    args = ["--config", str(REPO / "configs" / config), *extra, "--trainer.enable_checkpointing=false",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.callbacks=[]",
            f"--trainer.default_root_dir={tmp_path}"]
    cli = FitCLI(RLModule, RLDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
                 save_config_callback=None, auto_configure_optimizers=False, args=args)
    module, step, counts = cli.model, cli.model.training_step, []

    def counted_step(batch, batch_idx):
        with HostReads() as reads:
            out = step(batch, batch_idx)
        counts.append(reads.sites)
        return out

    module.training_step = counted_step
    cli.trainer.fit(module, datamodule=cli.datamodule)
    assert counts and cli.trainer.global_step > len(counts) >= 1
    assert all(not sites for sites in counts), [dict(s) for s in counts if s]


def _valid_action(env, td) -> torch.Tensor:
    if "action_mask" in td.keys():
        mask = td["action_mask"]
        return torch.multinomial(mask.reshape(-1, mask.shape[-1]).float(), 1).reshape(mask.shape[:-1])
    return env.action_spec.rand()


@pytest.mark.parametrize("name", ["dvrp", "dvrp improved", "hockey", "vacuum"])
def test_an_env_step_without_resets_reads_the_host_once(name, monkeypatch):
    """``step_and_maybe_reset`` of a native env, with its invariant checks deferred (as on a GPU), reads the host at
    most once in a step that starts no episode: the done flags, with the checks. (The hockey env's CPU-only
    shortcut, sweeping only the rackets near the puck, is switched to the GPU's sweep of all of them; the first steps,
    which cache constants on the device once, are not counted.)"""
    if name == "hockey":
        import envs.hockey.puck as hockey
        monkeypatch.setattr(hockey, "sweep_near", functools.partial(hockey.sweep_near, select=False))
    config = {"dvrp": DVRPConfig(), "dvrp improved": DVRPConfig(improve_every=1, cutoff_sweeps=2),
              "hockey": HockeyConfig(), "vacuum": VacuumConfig()}[name]
    torch.manual_seed(0)
    env = make_env(config, 32, seed=0)
    unwrap(env).checks.defer = True
    td, quiet = env.reset(), 0
    for i in range(60):
        td["action"] = _valid_action(env, td)
        with HostReads() as reads:
            step, td = env.step_and_maybe_reset(td)
        if i >= 2 and not bool(step["next", "done"].any()):
            quiet += 1
            assert reads.total <= 1, reads.sites
    assert quiet >= 10
