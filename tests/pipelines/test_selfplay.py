"""Self-play on the hockey env: draws follow the configured probabilities, the pool is bounded and
checkpointed, and the snapshot opponents really play in the training envs."""

from __future__ import annotations

import pytest
import torch

from callbacks.selfplay import KINDS, SelfPlay
from pipelines.fit import main
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import AtTrainStart, hockey_dqn_config

PROBABILITIES = {"self": 0.5, "weak": 0.3, "strong": 0.2}


def test_draws_follow_the_probabilities():
    selfplay = SelfPlay(probabilities=PROBABILITIES, seed=3)
    selfplay._generator = torch.Generator().manual_seed(3)
    empty = selfplay.draw_kinds(20_000)  # no snapshot yet: self's share goes to the scripted kinds
    assert empty.count("self") == 0
    assert empty.count("weak") / 20_000 == pytest.approx(0.6, abs=0.015)
    selfplay.pool.append({})
    drawn = selfplay.draw_kinds(20_000)
    for kind in KINDS:
        assert drawn.count(kind) / 20_000 == pytest.approx(PROBABILITIES.get(kind, 0.0), abs=0.015)


@pytest.mark.parametrize("kwargs, match", [
    ({"probabilities": {"self": 0.5, "weak": 0.4}}, "sum to 1"),
    ({"probabilities": {"self": 0.5, "medium": 0.5}}, "unknown kinds"),
    ({"pool_size": 0}, "pool_size"),
])
def test_bad_settings_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelfPlay(**kwargs)


def test_pool_is_bounded_checkpointed_and_played(tmp_path):
    callbacks = [{"class_path": "callbacks.SelfPlay",
                  "init_args": {"every_n_frames": 384, "pool_size": 3, "probabilities": PROBABILITIES}}]
    cli = main(["--config", hockey_dqn_config(tmp_path / "a", callbacks)])
    selfplay = next(c for c in cli.trainer.callbacks if isinstance(c, SelfPlay))
    assert len(selfplay.pool) == 3  # 6 snapshots taken (every 384 of 2,560 frames), the 3 newest kept
    base = cli.datamodule.env.base_env
    # the env's policy opponent is the drawn snapshot: same weights, greedy actions
    obs = torch.randn(5, 18)
    actions = base._opponent_policy(obs)
    assert actions.shape == (5,) and actions.dtype == torch.int64
    assert any(torch.equal(selfplay._opponent.policy.state_dict()[k], snap[k]) for snap in selfplay.pool
               for k in list(snap)[:1])
    # 41 draws of 8 rows; "self" only once the pool has a snapshot (34 of them): about 0.5 * 34 / 41 = 0.41
    total = sum(selfplay.drawn.values())
    assert total == 8 * 41 and 0.25 < selfplay.drawn["self"] / total < 0.6 and selfplay.drawn["static"] == 0
    # resume: the pool (and the draw stream) come back
    ckpt = periodic_checkpoints(tmp_path / "a" / "hockey" / "version_0" / "checkpoints")[20]
    state = torch.load(ckpt, weights_only=True)
    saved = next(v for k, v in state["callbacks"].items() if "SelfPlay" in k)
    def restored(trainer, module):  # at the resumed run's start, before its one more batch
        selfplay = next(c for c in trainer.callbacks if isinstance(c, SelfPlay))
        return [{k: v.clone() for k, v in snap.items()} for snap in selfplay.pool], selfplay.next_frames

    probe = AtTrainStart(restored)
    main(["--config", hockey_dqn_config(tmp_path / "b", callbacks),
          f"--data.init_args.total_frames={state['rl_state']['collected_frames'] + 64}", f"--ckpt_path={ckpt}"],
         callbacks=[probe])
    pool, next_frames = probe.value
    assert len(pool) == len(saved["pool"]) > 0 and next_frames == saved["next_frames"]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(pool, saved["pool"], strict=True) for k in a)


def test_an_env_without_opponents_is_rejected(tmp_path):
    from tests.pipelines.conftest import REPO

    with pytest.raises(ValueError, match="SelfPlay needs an env with opponents"):
        main(["--config", str(REPO / "configs" / "cartpole_dqn.yaml"), "--trainer.logger=false",
              f"--trainer.default_root_dir={tmp_path}", "--trainer.callbacks=[]",
              "--trainer.callbacks+=callbacks.SelfPlay",
              "--data.init_args.total_frames=2048"])


@pytest.mark.parametrize("name", ["hockey_sac", "hockey_dqn_selfplay", "hockey_dqn"])
def test_hockey_configs_run(tmp_path, name):
    """The shipped hockey configs build and train on a tiny budget (their curriculum / pool start right)."""
    from tests.pipelines.conftest import REPO

    cli = main(["--config", str(REPO / "configs" / f"{name}.yaml"), f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--data.init_args.total_frames=640", "--data.init_args.replay_buffer.init_random_frames=256",
                "--data.init_args.collector.num_envs=8", "--data.init_args.collector.frames_per_batch=64",
                "--data.init_args.replay_buffer.utd_ratio=1",
                "--model.init_args.network.init_args."
                + ("actor_hidden_dims=[16]" if name == "hockey_sac" else "hidden_dims=[16]")])
    assert cli.model.collected_frames == 640 and cli.trainer.global_step == (640 - 256) // 64
    # the SAC curriculum starts (and stays on this budget) in its shooting phase, without self-play draws;
    # hockey_dqn plays the weak opponent only (no SelfPlay callback)
    active = [c.active for c in cli.trainer.callbacks if isinstance(c, SelfPlay)]
    assert active == {"hockey_sac": [False], "hockey_dqn_selfplay": [True], "hockey_dqn": []}[name]
