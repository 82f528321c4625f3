"""``pipelines.fit --weights_from``: a new run that starts from a trained run's weights (fine-tuning, RL Zoo's
``--trained-agent``) under its own config, and refusals before anything is written."""

from __future__ import annotations

import torch

from pipelines.fit import main
from tests.pipelines.conftest import SMOKE, AtTrainStart, run_module


def _snapshot(trainer, module) -> dict:
    return {"weights": {k: v.detach().clone() for k, v in module.state_dict().items()},
            "flexibility": {k: v.detach().clone() for k, v in trainer.datamodule.env_models["flexibility"]
                            .state_dict().items()},
            "frames": module.collected_frames, "lr": trainer.optimizers[0].param_groups[0]["lr"]}


def test_a_new_run_starts_from_the_trained_weights_under_its_own_config(smoke_run, tmp_path):
    """The policy, the critic and the learned flexibility model start as the checkpoint's (on 3 vehicles where it
    trained on 2), the frames at 0 and the optimiser at this config's learning rate; the run trains and checkpoints
    in its own new folder."""
    checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
    probe = AtTrainStart(_snapshot)
    main(["--config", SMOKE, f"--weights_from={smoke_run['last']}", f"--trainer.logger.init_args.save_dir={tmp_path}",
          "--data.init_args.total_frames=480", "--model.init_args.lr=0.0001",
          "--data.init_args.env.init_args.num_vehicles=3", "--trainer.enable_progress_bar=false"], callbacks=[probe])
    start = probe.value
    assert start["frames"] == 0 and start["lr"] == 0.0001
    weights = checkpoint["state_dict"]
    assert weights.keys() == start["weights"].keys()
    different = [k for k in weights if not torch.equal(weights[k], start["weights"][k])]
    assert different == [], different
    trained = checkpoint["OnPolicyDataModule"]["env_models"]["flexibility"]
    assert all(torch.equal(trained[k], v) for k, v in start["flexibility"].items())
    assert (tmp_path / "dvrp_smoke" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_weights_that_do_not_fit_are_refused_before_anything_is_written(smoke_run, tmp_path):
    """Other network shapes, a file that is no checkpoint, a missing file: one line naming --weights_from, exit 2,
    no run folder."""
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    cases = [([f"--weights_from={smoke_run['last']}", "--model.init_args.network.init_args.hidden_dim=32"],
              "its weights do not fit this config's networks"),
             ([f"--weights_from={garbage}"], "is not a checkpoint this project can read"),
             ([f"--weights_from={tmp_path / 'missing.ckpt'}"], "no such file")]
    for extra, message in cases:
        proc = run_module("pipelines.fit", "--config", SMOKE, *extra,
                          f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", timeout=300)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "--weights_from=" in proc.stderr and message in proc.stderr and "Traceback" not in proc.stderr, (
            proc.stderr[-2000:])
        assert not (tmp_path / "runs").exists()


def test_weights_from_is_not_applied_to_a_resumed_run(smoke_run, tmp_path):
    """``--ckpt_path`` resumes with the checkpoint's own state; ``--weights_from`` beside it is said not to apply."""
    other = tmp_path / "other.ckpt"
    checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = {k: v + 1 if v.is_floating_point() else v for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, other)
    probe = AtTrainStart(_snapshot)
    main(["--config", SMOKE, f"--ckpt_path={smoke_run['last']}", f"--weights_from={other}",
          f"--trainer.logger.init_args.save_dir={tmp_path}", "--data.init_args.total_frames=2400",
          "--trainer.enable_progress_bar=false"], callbacks=[probe])
    resumed = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)["state_dict"]
    assert probe.value["frames"] == 1920
    assert all(torch.equal(resumed[k], probe.value["weights"][k]) for k in resumed)


def test_seeds_hand_weights_from_to_each_seeds_run(tmp_path):
    """``pipelines.seeds`` (and so ``benchmarks/results.py``) fine-tunes each seed from the same weights: the option
    reaches the seed's fit, which checks the file."""
    proc = run_module("pipelines.seeds", "--config", SMOKE, "--seeds", "0", "--out", str(tmp_path / "study"),
                      "--weights_from", str(tmp_path / "missing.ckpt"), timeout=300)
    assert proc.returncode != 0 and "unrecognized argument" not in proc.stderr, proc.stderr[-2000:]
    assert "--weights_from=" in proc.stderr and "no such file" in proc.stderr, proc.stderr[-2000:]
