"""Loading a checkpoint never runs code from it: a file that carries a pickled callable is refused by the
evaluation loader and by a resumed fit, and an exported model may only name a class of ``modules``."""

from __future__ import annotations

import pathlib

import pytest
import torch

from pipelines.evaluate import load_run
from pipelines.fit import main
from tests.pipelines.conftest import SMOKE


class Payload:
    """Unpickling this object calls ``Path.touch`` on its marker file (what a hostile file would do)."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture
def hostile(smoke_run, tmp_path) -> tuple[str, pathlib.Path]:
    """The smoke run's last checkpoint with one extra entry that runs code when unpickled."""
    checkpoint = torch.load(smoke_run["last"], map_location="cpu", weights_only=True)
    marker = tmp_path / "code_ran"
    checkpoint["extra"] = Payload(marker)
    path = tmp_path / "hostile.ckpt"
    torch.save(checkpoint, path)
    return str(path), marker


def test_evaluation_loader_refuses_code_in_a_checkpoint(hostile, capsys):
    """The evaluation loader checks the file as fit does: one message naming it, exit 2, the payload never runs."""
    path, marker = hostile
    with pytest.raises(SystemExit) as stop:
        load_run(SMOKE, path, [])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "is not a readable checkpoint" in err and "weights-only" in err
    assert not marker.exists()


def test_resume_refuses_code_in_a_checkpoint(hostile, tmp_path, capsys):
    """fit checks the file before building anything: one message naming it, exit 2, the payload never runs."""
    path, marker = hostile
    with pytest.raises(SystemExit) as stop:
        main(["--config", SMOKE, "--ckpt_path", path, "--trainer.logger=false", "--trainer.callbacks=[]",
              "--trainer.enable_checkpointing=false", f"--trainer.default_root_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "is not a readable checkpoint" in err and "weights-only" in err
    assert not marker.exists()
