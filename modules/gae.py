"""GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
arXiv:1506.02438) on a collected batch, by TorchRL's ``GAE``, with the values of the next observations that a
truncated episode and the batch's last step need."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase
from torchrl.modules import set_recurrent_mode
from torchrl.objectives.value import GAE


def bootstrapped_gae(batch: TensorDict, encoder: TensorDictModuleBase, critic: TensorDictModuleBase, gae: GAE,
                     recurrent: bool = False) -> None:
    """Write GAE's ``advantage`` and ``value_target`` ``[B, T, 1]`` into a collected batch ``[B, T]`` (no gradients).

    Values reuse the encoder's output the collector's policy computed (``hidden``, or a recurrent critic's
    ``critic_memory``: the critic's input; same weights; ``encoder`` makes it where the batch has none): the value of
    step t's next observation is step t + 1's value, except at the last step and after a truncation, where the next
    observation is encoded (after a termination it is not used; a recurrent encoder takes one step from the state
    after step t).

    Episodic life (Mnih et al. 2015): where the env writes ``end_of_life`` (``envs.games``: a life lost), GAE treats it
    as a termination (no bootstrap, no advantage carried across), while the env's episode, and its return in the
    logs, go on to the game's end.

    Args:
        batch: ``[B, T]`` with the reward GAE is set to read (``gae``'s keys: ``("next", "scaled_reward")``).
        encoder: observation -> the critic's input. critic: that input -> ``state_value``. gae: TorchRL's GAE, its
            done and terminated keys ``value_done`` / ``value_terminated`` (written here).
        recurrent: the encoder is a TorchRL ``LSTMModule`` (run over the rows in its recurrent mode).
    """
    with torch.no_grad():
        if critic.in_keys[0] not in batch.keys():
            with set_recurrent_mode(recurrent):
                encoder(batch)
        value = critic(batch)["state_value"]  # [B, T, 1]
        next_value = torch.cat([value[:, 1:], torch.zeros_like(value[:, :1])], 1)
        done, terminated = batch["next", "done"], batch["next", "terminated"]
        end_of_life = batch.get(("next", "end_of_life"), None)
        if end_of_life is not None:
            done, terminated = done | end_of_life, terminated | end_of_life
        batch["next", "value_done"], batch["next", "value_terminated"] = done, terminated
        terminated = terminated.squeeze(-1)
        need = (done.squeeze(-1) & ~terminated)
        need[:, -1] = ~terminated[:, -1]
        if bool(need.any()):
            ends = batch["next"][need].select(*(k for k in encoder.in_keys if k != "is_init")).clone()
            if recurrent:  # one step on from the state after step t
                ends.set("is_init", torch.zeros(*ends.batch_size, 1, dtype=torch.bool, device=ends.device))
            next_value[need] = critic(encoder(ends))["state_value"]
        batch["next", "state_value"] = next_value
        gae(batch)
