"""Scripted window-offer policies for the DVRP env: the baselines and references of ``pipelines.evaluate``.

All read ``action_mask`` and ``offer_cost`` (km) of the current request; ``informed`` also reads the
generator's exact type posterior and ``clairvoyant`` the hidden type, through the env. Cost ties go to
the smaller |shift| (``shared/notes/dvrp-defaults.md``, pitfall 7). The expected-value rules never
reject while an offer is feasible and floor the margin at ``0.001 * served_reward`` (pitfall 1:
a myopic "reject when unprofitable" rule skips customers that pay off later).

* ``preferred``: the preferred window when feasible, else reject.
* ``greedy``: the feasible offer with the lowest insertion cost.
* ``fallback``: the preferred window if feasible, else the cheapest feasible shift.
* ``prior``: argmax over feasible offers of P(k >= |s|) * max(R - c_s, 0.001 R), P from the type mix.
* ``informed``: the same with the exact posterior p(k | attributes) (a reference: no deployed policy has it).
* ``random``: uniform over feasible offers (reject only when none is).
* ``clairvoyant``: knows the type; the cheapest feasible offer with |s| <= k (a myopic reference,
  not an upper bound).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from envs.dvrp.env import DVRPEnv

BASELINES = ("preferred", "greedy", "fallback", "prior", "informed", "random", "clairvoyant")
ATTRIBUTE_BLIND = ("preferred", "greedy", "fallback", "prior")


class ScriptedOfferPolicy(TensorDictModuleBase):
    """One of :data:`BASELINES` as a TensorDict module writing ``action`` ``[B]``.

    Args:
        name: the rule (see the module docstring).
        env: the (base) DVRP env the policy acts in, read for ``informed`` / ``clairvoyant``.
        seed: seed of ``random``'s draws.

    Raises:
        ValueError: an unknown ``name`` (the message lists the allowed ones).
    """

    in_keys = ["action_mask", "offer_cost"]
    out_keys = ["action"]

    def __init__(self, name: str, env: DVRPEnv, seed: int = 0) -> None:
        super().__init__()
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; allowed: {', '.join(BASELINES)}")
        self.name, self.env = name, env
        s = env.config.max_shift
        self.abs_shift = torch.arange(-s, s + 1, device=env.device).abs()
        # window indices by increasing |shift| (0, -1, +1, -2, ...): argmax over this order breaks ties
        self.order = torch.argsort(self.abs_shift * 2 + (torch.arange(-s, s + 1, device=env.device) > 0), stable=True)
        self.generator = torch.Generator(device=env.device).manual_seed(seed)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        mask = tensordict["action_mask"]
        tensordict.set("action", self.choose(mask[..., :-1], tensordict["offer_cost"][..., :-1]))
        return tensordict

    def choose(self, feasible: Tensor, cost: Tensor) -> Tensor:
        """Action ``[B]`` from the feasible window offers ``[B, W]`` and their insertion costs (km)."""
        s, reject = self.env.config.max_shift, self.env.num_actions - 1
        if self.name == "preferred":
            return torch.where(feasible[:, s], s, reject)
        if self.name == "random":
            weights = feasible.float() + (~feasible.any(-1, keepdim=True)).float() * 1e-9
            pick = torch.multinomial(weights, 1, generator=self.generator).squeeze(-1)
            return torch.where(feasible.any(-1), pick, reject)
        if self.name in ("greedy", "fallback", "clairvoyant"):
            allowed = feasible
            if self.name == "clairvoyant":
                allowed = feasible & (self.abs_shift <= self.env.request_type().unsqueeze(-1))
            score = -torch.where(allowed, cost, torch.inf)
            if self.name == "fallback":
                score[:, s] = torch.where(allowed[:, s], torch.inf, score[:, s])
        else:  # prior / informed: expected margin
            reward = self.env.config.served_reward
            p_type = (self.env.type_mix.expand(feasible.shape[0], -1) if self.name == "prior"
                      else self.env.request_posterior())
            at_least = p_type.flip(-1).cumsum(-1).flip(-1)  # P(k >= j), [B, K]
            p_accept = at_least[:, self.abs_shift.clamp_max(at_least.shape[-1] - 1)]
            p_accept = torch.where(self.abs_shift < at_least.shape[-1], p_accept, 0.0)
            value = p_accept * torch.clamp_min(reward - cost, 0.001 * reward)
            allowed = feasible
            score = torch.where(allowed, value, -torch.inf)
        best = self.order[score[:, self.order].argmax(-1)]  # first maximum in |shift| order
        return torch.where(allowed.any(-1), best, reject)
