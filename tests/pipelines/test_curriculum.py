"""Curriculum phases on the hockey env (DQN on its discrete actions): both advance rules, buffer
clearing, the settings reaching the env, resume in the right phase, and bad phase specs."""

from __future__ import annotations

import json

import pytest
import torch

from callbacks.curriculum import CurriculumPhases
from callbacks.evaluation import PolicyEvaluation
from callbacks.evaluation import evaluations as run_evaluations
from envs.hockey import MODES, OPPONENTS
from pipelines.fit import main
from tests.conftest import periodic_checkpoints
from tests.pipelines.conftest import AtTrainStart, hockey_dqn_config

PHASES = [
    {"name": "shooting", "settings": {"mode": "TRAIN_SHOOTING", "opponent": "static", "w_touch": 1.0},
     "until": {"frames": 640}},
    {"name": "defense", "settings": {"mode": "TRAIN_DEFENSE", "opponent": "weak"}, "clear_buffer": True,
     "until": {"metric": "eval/weak/episode_return", "at_least": -1e9, "evaluations": 2}},
    {"name": "normal", "settings": {"mode": "NORMAL", "opponent": "strong"}, "until": {"frames": 10**9}},
]


def _config(tmp_path, phases, every: int = 320) -> str:
    return hockey_dqn_config(tmp_path, [
        {"class_path": "callbacks.PolicyEvaluation",
         "init_args": {"every_n_frames": every, "num_envs": 4, "max_steps": 40,
                       "settings": {"weak": {"mode": "NORMAL", "opponent": "weak"}}}},
        {"class_path": "callbacks.CurriculumPhases", "init_args": {"phases": phases}}])


def _curriculum(cli) -> CurriculumPhases:
    return _curriculum_of(cli.trainer)


def _curriculum_of(trainer) -> CurriculumPhases:
    return next(c for c in trainer.callbacks if isinstance(c, CurriculumPhases))


def test_phases_advance_by_frames_then_by_metric_and_clear_the_buffer(tmp_path):
    cli = main(["--config", _config(tmp_path, PHASES)])
    curriculum, data = _curriculum(cli), cli.datamodule
    evaluations = run_evaluations(cli.trainer)  # kept by callbacks.PolicyEvaluation
    assert curriculum.phase == 2 and curriculum.name == "normal"
    # phase 1 began at the first batch end at or past 640 frames; phase 2 after the 2nd evaluation in phase 1
    evals_in_defense = [h["frames"] for h in evaluations if h["frames"] > 640]
    assert curriculum.phase_start == evals_in_defense[1]
    # the defense phase emptied the buffer when it began (after the batch that reached 640 frames was
    # stored): it holds exactly the frames collected after it (n_steps 1 holds nothing back)
    assert len(data.buffer) == 2560 - 640
    # the training env got the last phase's settings; the evaluation env kept its own
    base = data.env.base_env
    assert int(base._next_mode[0]) == MODES.index("NORMAL") and int(base._next_opponent[0]) == OPPONENTS.index("strong")
    assert base.shaping["w_touch"] == 1.0  # set in phase 0, not changed since
    assert "eval/weak/won" in evaluations[-1]


def test_resume_restores_the_phase_and_its_settings(tmp_path):
    cli = main(["--config", _config(tmp_path / "a", PHASES)])
    ckpts = list(periodic_checkpoints(tmp_path / "a" / "hockey" / "version_0" / "checkpoints").values())
    for ckpt in ckpts:
        state = torch.load(ckpt, weights_only=True)
        saved = next(v for k, v in state["callbacks"].items() if "CurriculumPhases" in k)
        if saved["phase"] == 1:
            break
    else:
        pytest.fail("no checkpoint in phase 1")
    frames = state["rl_state"]["collected_frames"]
    probe = AtTrainStart(lambda trainer, module: (
        _curriculum_of(trainer).phase, _curriculum_of(trainer).phase_start,
        int(trainer.datamodule.env.base_env._next_mode[0])))
    resumed = main(["--config", _config(tmp_path / "b", PHASES), f"--data.init_args.total_frames={frames + 64}",
                    f"--ckpt_path={ckpt}"], callbacks=[probe])  # (one more batch of 64 frames)
    assert probe.value == (1, saved["phase_start"], MODES.index("TRAIN_DEFENSE"))
    assert cli.trainer.global_step > resumed.trainer.global_step


def test_a_metric_rule_that_is_never_met_keeps_the_phase(tmp_path):
    phases = [PHASES[0], {**PHASES[1], "until": {"metric": "eval/weak/won", "at_least": 2.0, "evaluations": 1}},
              PHASES[2]]
    cli = main(["--config", _config(tmp_path, phases), "--data.init_args.total_frames=1920"])
    assert _curriculum(cli).phase == 1


@pytest.mark.parametrize("phases, match", [
    ([], "at least one phase"),
    ([{"name": "a"}, {"name": "a"}], r"phases\[1\].name"),
    ([{"name": "a", "until": {"episodes": 3}}], r"phases\[0\].until"),
    ([{"name": "a", "until": {"frames": 0}}], r"phases\[0\].until"),
    ([{"name": "a", "rule": 1}], r"phases\[0\].rule"),
])
def test_bad_phases_are_rejected(phases, match):
    with pytest.raises(ValueError, match=match):
        CurriculumPhases(phases)


def test_unknown_env_setting_stops_the_run(tmp_path):
    phases = [{"name": "a", "settings": {"mode": "NORMAL", "puck_speed": 3.0}}]
    with pytest.raises(ValueError, match="puck_speed"):
        main(["--config", _config(tmp_path, phases)])


def test_evaluation_logs_a_clip_to_tensorboard(tmp_path):
    """PolicyEvaluation(video_frames=12): row 0's first 12 frames as an animated GIF image, ``eval/video``."""
    import io

    from PIL import Image, ImageSequence
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    evaluation = {"class_path": "callbacks.PolicyEvaluation",
                  "init_args": {"every_n_frames": 1280, "num_envs": 2, "video_frames": 12, "video_fps": 10}}
    main(["--config", hockey_dqn_config(tmp_path, [evaluation])])
    events = EventAccumulator(str(tmp_path / "hockey" / "version_0"), size_guidance={"images": 0})
    events.Reload()
    clips = events.Images("eval/video")
    assert [c.step for c in clips] == [1280, 2560]  # the schedule's; the end does not evaluate the same frames again
    with Image.open(io.BytesIO(clips[0].encoded_image_string)) as gif:
        assert gif.format == "GIF"
        assert sum(frame.info["duration"] for frame in ImageSequence.Iterator(gif)) == 12 * 100


def test_the_evaluations_are_published_for_other_callbacks_and_kept_by_their_callback(tmp_path):
    """Two PolicyEvaluations of different settings coexist (each its own state_key, history and checkpoint state);
    the latest evaluation is in ``trainer.callback_metrics`` with its ``eval/frames``; the curriculum's window of
    the phase's values is in its checkpoint state."""
    strong = {"class_path": "callbacks.PolicyEvaluation",
              "init_args": {"every_n_frames": 640, "num_envs": 2, "max_steps": 40,
                            "settings": {"strong": {"mode": "NORMAL", "opponent": "strong"}}}}
    config = _config(tmp_path, [PHASES[0], {**PHASES[1], "until": {"metric": "eval/weak/won", "at_least": 2.0,
                                                                   "evaluations": 1}}, PHASES[2]])
    cli = main(["--config", config, f"--trainer.callbacks+={json.dumps(strong)}"])
    weak_eval, strong_eval = [c for c in cli.trainer.callbacks if isinstance(c, PolicyEvaluation)]
    assert weak_eval.state_key != strong_eval.state_key
    assert [h["frames"] for h in weak_eval.history] == [320.0 * k for k in range(1, 9)]
    assert [h["frames"] for h in strong_eval.history] == [640.0, 1280.0, 1920.0, 2560.0]
    assert all("eval/strong/won" in h and "eval/weak/won" not in h for h in strong_eval.history)
    published = cli.trainer.callback_metrics
    assert float(published["eval/frames"]) == 2560.0
    assert float(published["eval/weak/won"]) == weak_eval.history[-1]["eval/weak/won"]
    state = torch.load(tmp_path / "hockey" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["callbacks"][weak_eval.state_key]["history"] == weak_eval.history
    assert state["callbacks"][strong_eval.state_key]["history"] == strong_eval.history
    curriculum = _curriculum(cli)
    assert curriculum.phase == 1  # (never won twice over)
    in_phase = [h["eval/weak/won"] for h in weak_eval.history if h["frames"] > curriculum.phase_start]
    assert curriculum.window == in_phase and len(in_phase) >= 4
    assert state["callbacks"][curriculum.state_key]["window"] == in_phase


def test_a_metric_no_evaluation_has_stops_the_run_naming_those_it_has(tmp_path):
    phases = [{"name": "a", "until": {"metric": "eval/weak/wins", "at_least": 0.5, "evaluations": 1}},
              {"name": "b"}]
    with pytest.raises(ValueError, match=r"phases\[0\]\.until\.metric='eval/weak/wins': the evaluation at 320 frames "
                                         r"has no such metric; it has .*eval/weak/won"):
        main(["--config", _config(tmp_path, phases)])


def test_a_checkpoint_of_the_old_layout_keeps_its_evaluations_and_window():
    """Before the history was the callbacks', the module kept it (``rl_state.evaluations``) and the data module
    the self-play flag: the callbacks take them from a checkpoint of that layout."""
    from callbacks import SelfPlay

    old = {"rl_state": {"evaluations": [{"frames": 320.0, "eval/weak/won": 0.25}, {"frames": 960.0,
                                                                                  "eval/weak/won": 0.75}]},
           "OffPolicyDataModule": {"self_play": True}}
    evaluation = PolicyEvaluation(every_n_frames=320)
    evaluation.on_load_checkpoint(None, None, old)
    evaluation.load_state_dict({"next_frames": 1280, "best": 0.75})
    assert evaluation.history == old["rl_state"]["evaluations"]
    curriculum = CurriculumPhases([{"name": "a", "until": {"frames": 100}},
                                   {"name": "b", "until": {"metric": "eval/weak/won", "at_least": 0.9,
                                                           "evaluations": 2}}, {"name": "c"}])
    curriculum.on_load_checkpoint(None, None, old)
    curriculum.load_state_dict({"phase": 1, "phase_start": 640})
    assert curriculum.window == [0.75]
    self_play = SelfPlay(active=False)
    self_play.on_load_checkpoint(None, None, old)
    assert self_play.active
