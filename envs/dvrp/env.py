"""Dynamic VRP with time windows where each request gets a window offer: a batched TorchRL env.

A depot and M identical vehicles of capacity Q serve customers in the plane (travel time = Euclidean
distance, cost = distance in km). An episode presents N requests one at a time; step t presents
request t. The agent offers the preferred window, a window shifted by +-1..+-S slots, or rejects.
A customer of hidden type k accepts a shift s iff |s| <= k; an accepted request is inserted into the
plan (by the cost oracle) with its agreed window, a refused or rejected one is lost.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor
from torchrl.data import Binary, Categorical, Composite, Unbounded

from envs import rng
from envs.checks import rows_of
from envs.dvrp.customers import CustomerModel, acceptance_log_prob, embedding_width
from envs.dvrp.generator import _SIZE, InstanceGenerator, type_posterior
from envs.dvrp.neural_oracle import NeuralOracle, RoutingSolver
from envs.dvrp.oracle import CostOracle, InsertionOracle
from envs.dvrp.reader import FileInstances
from envs.dvrp.render import plot_routes
from envs.restored import restored_tensor
from envs.seeding import NativeBatchedEnv

UNSEEN, SERVED, LOST = 0, 1, 2
COORD_SCALE = 100.0  # km; coordinates are divided by it in observations
STATIC_FEATURES = 7  # + K attributes: x, y, demand/Q, window start/H, end/H, service/H, slot/H
OFFER_FEATURES = 8  # + 1 (predicted acceptance) with a flexibility model
VEHICLE_FEATURES = 4
INFO_KEYS = ("plan_cost_km", "served", "failure_rate", "refused")
_PACKED = ("demand", "service", "ready", "due", "slot")  # packed customer columns 2..6 (after x, y)
_DEMAND, _SERVICE, _READY, _DUE, _SLOT, _ATTR = 2, 3, 4, 5, 6, 7


class DVRPParameters(Protocol):
    """What :class:`DVRPEnv` reads of its config: attributes of :class:`envs.dvrp.config.DVRPConfig`, which builds
    the env (so this module does not import that one)."""

    num_customers: int  # N, the largest size of a day
    num_vehicles: int  # M, the largest fleet
    sizes: list[tuple[int, int]]  # the (N, M) sizes days are drawn from
    max_shift: int  # S
    type_mix: list[float]  # probabilities of the K flexibility types
    attribute_separation: float
    served_reward: float
    dtype: str  # float32 or float64
    oracle: str  # insertion or neural
    oracle_augment: int
    source: InstanceGenerator | FileInstances  # draws the instances
    refusal_mask_threshold: float | None
    improve_every: int  # bookings between improvements of the tentative plan (0: never)
    improve_passes: int
    improve_reversal: int  # the longest segment the bookings' 2-opt within a route reverses
    cutoff_sweeps: int  # local-search sweeps of the whole plan at the cut-off
    cutoff_ruins: int  # ruin-and-recreate iterations at the cut-off
    cutoff_reversal: int  # the longest segment the cut-off's 2-opt within a route reverses
    neighbourhood: int

    @property
    def num_types(self) -> int:
        """K."""


class DVRPEnv(NativeBatchedEnv):
    """B independent dynamic VRPTW episodes stepping as one batch (``batch_size=[B]``).

    Actions:
        ``action`` int64 ``[B]`` in ``[0, A)``, A = 2S + 2: index ``s + S`` offers the preferred window
        shifted by s slots, ``[e + s * slot, l + s * slot]`` clipped to ``[0, H]`` (slot = the preferred
        window's width; a clipped, narrowed window still counts as shift s); index ``2S + 1`` rejects.

    Observations (all float32 unless noted):
        * ``customers`` ``[B, N, 10 + K]``: per customer x/100, y/100, demand/Q, window start/H, end/H
          (the agreed window once served, else the preferred one), service/H, slot/H, K attributes and
          a one-hot status (unseen / served / lost). A customer is unseen until its request has been
          decided (the current request is ``request``); unseen rows are zeros but for their status:
          the future is not observed. With a flexibility model (``flexibility``) the K
          attributes are followed by the model's p(k | attributes) ``[K]`` and embedding ``[D]``
          (computed when the episode starts, with the model of that moment): ``[B, N, 10 + 2K + D]``.
        * ``request`` ``[B, 11 + K]`` (``[B, 11 + 2K + D]`` with the model): the current request's x/100,
          y/100, demand/Q, e/H, l/H, service/H, slot/H, K attributes (and the model's columns; zeros at
          ``done``), then t/N, served/N, plan cost / (N * served_reward) and the requests still to come,
          (N - t)/100 (N: the day's size).
        * ``offers`` ``[B, A, 8]``: per action shift/S, |shift|/S, is-reject, offered window start/H,
          end/H, width/slot, insertion cost / served_reward, feasible; with the model a 9th column, the
          predicted acceptance probability P(k >= |s| | x) (0 for reject).
        * ``vehicles`` ``[B, M, 4]``: load/Q, customers on the route / N, return time to the depot / H, and 1 for
          the vehicles of the day's fleet (0 for the rest of the M slots, on a smaller day of mixed sizes).
        * ``depot`` ``[B, 2]``: depot x/100, y/100.
        * ``action_mask`` bool ``[B, A]``: True = allowed. An offer is masked when its window is empty
          after clipping or cannot be inserted feasibly (capacity, every promised window, return by H).
          Reject is always allowed. With ``refusal_mask_threshold`` set, offers whose predicted
          refusal probability exceeds it are masked too.
        * ``outcome`` (with the model): the decided offer, for the model's training: ``attributes``
          ``[B, K]``, int64 ``shift`` ``[B]`` (|s|), bool ``offered`` (False for a reject and at reset),
          bool ``accepted`` and int64 ``kind`` ``[B]`` (the hidden type, for diagnostics only).
        * ``offer_cost`` ``[B, A]``: insertion cost of each offer (km), 0 where masked and for reject.
        * ``info``: ``plan_cost_km``, ``served``, ``failure_rate`` (lost / N) and ``refused`` (offers
          declined by the customer), each ``[B, 1]``, so far in the episode; final at ``done``.

    Constraints (kept by the oracle): load <= Q per route; service starts inside each agreed window
    (waiting allowed); each vehicle leaves the depot at 0 and returns by H; each customer served once.

    Reward:
        ``served_reward * accepted - (plan cost after - plan cost before)`` (km-equivalents), ``[B, 1]``.

    Termination:
        ``done = terminated`` after the day's N-th request (no truncation).

    Sizes:
        With several sizes (``config.sizes``, from lists in ``num_customers`` / ``num_vehicles``), every
        episode draws its (N, M) uniformly; the tensors are shaped for the largest, ``N_max`` customer rows
        and ``M_max`` vehicles: a day of N < N_max uses the first N of its N_max drawn customers (a uniform
        subset, as arrivals are in random order; the rest stay unseen) and the first M vehicles (the others
        take no customer).

    Seeding:
        Row b of an env seeded ``s`` plays the episodes of a single env seeded ``s + b`` (counter-based
        draws, see :mod:`envs.rng`), so results do not depend on the batch size.

    Args:
        config: the problem's parameters (a :class:`~envs.dvrp.config.DVRPConfig`).
        num_envs: B.
        seed: seed of row 0.
        device: torch device of all tensors.
        flexibility: the run's learned customer model (a :class:`~envs.dvrp.customers.CustomerModel`, built from
            ``config.flexibility``), held as ``self.flexibility`` and shared, not copied: new weights loaded into
            it apply from the next episode on; None: none.
        routing_policy: the neural oracle's routing policy (``config.oracle: neural``), read from
            ``config.oracle_checkpoint`` by the pipeline.
    """

    batch_locked = True

    def __init__(self, config: DVRPParameters, num_envs: int = 1, seed: int = 0, device: torch.device | str = "cpu",
                 flexibility: CustomerModel | None = None, routing_policy: RoutingSolver | None = None) -> None:
        super().__init__(num_envs, device)  # checks num_envs >= 1
        self.config = config
        b, n, m, k = num_envs, config.num_customers, config.num_vehicles, config.num_types
        s = config.max_shift
        self.num_windows = 2 * s + 1
        self.num_actions = 2 * s + 2
        self.dtype = getattr(torch, config.dtype)
        self.flexibility = flexibility  # the run's model, shared by its envs; None without one
        extra = 0 if flexibility is None else k + embedding_width(flexibility, k)
        dev = self.device
        self.shifts = torch.arange(-s, s + 1, device=dev)
        if config.oracle == "neural":
            self.oracle: CostOracle = NeuralOracle(b, m, n, routing_policy, device=dev, dtype=self.dtype,
                                                   num_augment=config.oracle_augment)
        else:
            self.oracle = InsertionOracle(b, m, n, device=dev, dtype=self.dtype, neighbourhood=config.neighbourhood)
        self.oracle.checks = self.checks  # deferred with the env's (no host read per step on a GPU)
        self.type_mix = torch.tensor(config.type_mix, dtype=torch.float32, device=dev)
        self.sizes = torch.tensor(config.sizes, dtype=torch.long, device=dev)  # [P, 2]: (N, M) pairs
        self.size = torch.full((b,), n, dtype=torch.long, device=dev)  # N of each row's day
        self.fleet = torch.full((b,), m, dtype=torch.long, device=dev)  # M of each row's day
        self.row_seed = torch.zeros(b, dtype=torch.long, device=dev)
        self.episode = torch.zeros(b, dtype=torch.long, device=dev)
        self._set_seed(seed)
        # instance data: the TensorDict (for exports and rare reads) and packed copies for the step
        self.instances = config.source.sample(self.row_seed.clone(), self.dtype).to(dev)
        self.customers = torch.zeros(b, n, _ATTR + k, dtype=self.dtype, device=dev)  # raw, packed
        self.static = torch.zeros(b, n, STATIC_FEATURES + k + extra, device=dev)  # normalised table columns
        self.table = torch.zeros(b, n, STATIC_FEATURES + k + extra + 3, device=dev)
        self.kind = torch.zeros(b, n, dtype=torch.long, device=dev)
        self.t = torch.zeros(b, dtype=torch.long, device=dev)
        self.status = torch.zeros(b, n, dtype=torch.long, device=dev)
        self.agreed = torch.zeros(b, n, 2, dtype=self.dtype, device=dev)
        self.counts = torch.zeros(b, 2, dtype=torch.float32, device=dev)  # served, refused
        self.windows = torch.zeros(b, self.num_windows, 2, dtype=self.dtype, device=dev)
        self.offer_cost = torch.zeros(b, self.num_actions, device=dev)
        self.mask = torch.ones(b, self.num_actions, dtype=torch.bool, device=dev)
        self._row = torch.arange(b, device=dev) * n  # flat index of each row's customer 0
        self._statuses = torch.arange(3, device=dev)  # UNSEEN, SERVED, LOST: the one-hot columns of a status
        self._request = torch.zeros(b, STATIC_FEATURES + k + extra, device=dev)  # normalised current request
        self.acceptance = torch.ones(b, n, self.num_windows, device=dev)  # predicted P(k >= |s|) per window
        self._accept_p = torch.ones(b, self.num_windows, device=dev)  # ... of the current request
        self._outcome = self._no_outcome(b, k)
        self._saved: tuple[Tensor, Tensor, Tensor] | None = None  # restored predictions, rows still to use them
        # per action: the smallest type that accepts it (|shift|; reject: K, accepted by nobody)
        self._need = torch.cat([self.shifts.abs(), torch.tensor([k], device=dev)])
        self._steps = self.shifts.to(self.dtype).view(-1, 1)  # [W, 1]
        self._ones = torch.ones(b, 1, dtype=torch.bool, device=dev)
        self._vehicle = torch.arange(m, device=dev)
        self._zeros = torch.zeros(b, 1, device=dev)
        offer_const = torch.stack([self.shifts / max(s, 1), self.shifts.abs() / max(s, 1),
                                   torch.zeros(self.num_windows, device=dev)], -1)
        self._offer_const = torch.cat([offer_const, torch.tensor([[0.0, 0.0, 1.0]], device=dev)]).float()
        self._make_specs(b, n, m, k, extra)

    # ------------------------------------------------------------------ specs
    def _make_specs(self, b: int, n: int, m: int, k: int, extra: int) -> None:
        a = self.num_actions
        f32 = dict(dtype=torch.float32, device=self.device)
        outcome = {} if self.flexibility is None else {"outcome": Composite(
            attributes=Unbounded(shape=(b, k), **f32),
            shift=Unbounded(shape=(b,), dtype=torch.long, device=self.device),
            offered=Unbounded(shape=(b,), dtype=torch.bool, device=self.device),
            accepted=Unbounded(shape=(b,), dtype=torch.bool, device=self.device),
            kind=Unbounded(shape=(b,), dtype=torch.long, device=self.device), shape=(b,))}
        self.observation_spec = Composite(
            customers=Unbounded(shape=(b, n, STATIC_FEATURES + k + extra + 3), **f32),
            request=Unbounded(shape=(b, 11 + k + extra), **f32),
            offers=Unbounded(shape=(b, a, OFFER_FEATURES + (extra > 0)), **f32),
            vehicles=Unbounded(shape=(b, m, VEHICLE_FEATURES), **f32),
            depot=Unbounded(shape=(b, 2), **f32),
            action_mask=Binary(n=a, shape=(b, a), dtype=torch.bool, device=self.device),
            offer_cost=Unbounded(shape=(b, a), **f32),
            info=Composite({key: Unbounded(shape=(b, 1), **f32) for key in INFO_KEYS}, shape=(b,)),
            **outcome,
            shape=(b,),
        )
        self.action_spec = Categorical(n=a, shape=(b,), device=self.device)
        self.reward_spec = Unbounded(shape=(b, 1), **f32)
        self.add_episode_reward_spec()

    # ------------------------------------------------------------------ seeding / state
    def resume_state(self) -> dict[str, Tensor]:
        """The base state (row seeds, episodes in progress) and, with a flexibility model, the
        predictions those episodes started with (``predictions`` ``[B, N, K + D]``, ``acceptance``
        ``[B, N, W]``): the model may have been updated since."""
        state = super().resume_state()
        if self.flexibility is not None:
            state["predictions"] = self.static[..., STATIC_FEATURES + self.config.num_types:].cpu().clone()
            state["acceptance"] = self.acceptance.cpu().clone()
        return state

    def load_resume_state(self, state: dict[str, Tensor], keep_row_seeds: bool = False) -> bool:
        """Restore :meth:`resume_state` (see :meth:`NativeBatchedEnv.load_resume_state`), with the saved
        predictions when the rows play the saved rows' episodes (rows with other seeds recompute theirs
        with the current model).

        Returns:
            Whether the rows play the saved rows' episodes.

        Raises:
            RestoredStateError: the state was saved from an env with another batch size, or its predictions are
                not of this env's shape, finite, log-probabilities and embeddings (within [-1e4, 1]), or
                acceptance probabilities in [0, 1].
        """
        same_rows = super().load_resume_state(state, keep_row_seeds)
        if same_rows and self.flexibility is not None and "predictions" in state:
            predictions = restored_tensor(state["predictions"], "env state.predictions",  # (log-probabilities and
                                          self.static[..., STATIC_FEATURES + self.config.num_types:].cpu(),
                                          low=-1e4, high=1.0 + 1e-5)  # a tanh embedding: -1e30 broke sampling)
            acceptance = restored_tensor(state.get("acceptance"), "env state.acceptance", self.acceptance.cpu(),
                                         low=0.0, high=1.0 + 1e-5)  # (probabilities, to float rounding)
            self._saved = (predictions.to(self.device), acceptance.to(self.device),
                           torch.ones(self.batch_size[0], dtype=torch.bool, device=self.device))
        return same_rows

    # ------------------------------------------------------------------ dynamics
    def _reset(self, tensordict: TensorDict | None = None, **kwargs) -> TensorDict:
        b = self.batch_size[0]
        rows, idx, _, keys = self.start_episodes(tensordict)
        new = self.config.source.sample(keys, self.dtype).to(self.device)
        if self.sizes.shape[0] > 1:
            pick = (rng.uniform(keys, _SIZE, (), torch.float64) * self.sizes.shape[0]).long()
            drawn = self.sizes.index_select(0, pick.clamp_max(self.sizes.shape[0] - 1).to(self.device))
            self.size[idx], self.fleet[idx] = drawn[:, 0], drawn[:, 1]
        self.instances[idx] = new
        self.customers[idx] = torch.cat([new["xy"], torch.stack([new[c] for c in _PACKED], -1), new["attributes"]], -1)
        horizon, capacity = new["horizon"][:, None, None], new["capacity"][:, None, None]
        columns = [new["xy"] / COORD_SCALE, new["demand"].unsqueeze(-1) / capacity,
                   torch.stack([new["ready"], new["due"], new["service"], new["slot"]], -1) / horizon,
                   new["attributes"]]
        if self.flexibility is not None:
            columns.extend(self._predict(new["attributes"], idx))
        self.static[idx] = torch.cat(columns, -1).float()
        self.kind[idx] = new["kind"]
        self.t = torch.where(rows, 0, self.t)
        self.status = torch.where(rows.unsqueeze(-1), UNSEEN, self.status)
        self.agreed = torch.where(rows.view(-1, 1, 1), 0.0, self.agreed)
        self.counts = torch.where(rows.unsqueeze(-1), 0.0, self.counts)
        inst = self.instances
        improves = self.config.improve_every or self.config.cutoff_sweeps  # (its neighbourhoods, from the day's xy)
        self.oracle.reset(rows, inst["depot"], inst["horizon"], inst["capacity"], self.fleet,
                          xy=inst["xy"] if improves else None)
        unseen = torch.zeros_like(self.table[0])
        unseen[:, -3 + UNSEEN] = 1.0
        self.table = torch.where(rows.view(-1, 1, 1), unseen, self.table)
        self._outcome = self._no_outcome(b, self.config.num_types)
        self._quote()
        return self._observation().set("episode_reward", self.episode_returns())

    def _step(self, tensordict: TensorDict) -> TensorDict:
        b, n, w = self.batch_size[0], self.config.num_customers, self.num_windows
        size = self.size
        action = tensordict["action"].reshape(b)
        self.checks("action_mask", ~self.mask.gather(1, action.unsqueeze(-1)).squeeze(-1), lambda bad: ValueError(
            f"action violates action_mask in rows {rows_of(bad)}: only offers with a feasible window "
            f"(and reject, index {self.num_actions - 1}) are allowed"))
        self.checks("finished", self.t >= size, lambda bad: RuntimeError(
            f"step() on a finished episode in rows {rows_of(bad)}: reset the done rows first"))
        flat = self._row + self.t.clamp_max(n - 1)  # in range under deferred checks too (the error comes at the read)
        accept = self._need.index_select(0, action) <= self.kind.view(-1).index_select(0, flat)
        offered = action < w
        window = action.clamp_max(w - 1)
        delta = self.oracle.commit(window, accept)
        reward = self.config.served_reward * accept - delta + self._improve(size)
        agreed = self.windows.gather(1, window.view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1) * accept.unsqueeze(-1)
        self.agreed.view(-1, 2).index_copy_(0, flat, agreed)
        self.counts = self.counts + torch.stack([accept, offered & ~accept], -1)
        status = LOST - accept.long() * (LOST - SERVED)
        self.status.view(-1).index_copy_(0, flat, status)
        # the decided customer's row of the table: its agreed window if served, and its status
        row = torch.where(accept.unsqueeze(-1), (agreed / self.instances["horizon"].unsqueeze(-1)).float(),
                          self._request[:, 3:5])
        # the status one-hot by comparison (F.one_hot reads its input's range back on a CPU)
        row = torch.cat([self._request[:, :3], row, self._request[:, 5:],
                         (status.unsqueeze(-1) == self._statuses).float()], -1)
        self.table = self.table.view(-1, self.table.shape[-1]).index_copy(0, flat, row).view_as(self.table)
        if self.flexibility is not None:
            k = self.config.num_types
            self._outcome = TensorDict(attributes=self._request[:, STATIC_FEATURES:STATIC_FEATURES + k],
                                       shift=self._need.index_select(0, window), offered=offered, accepted=accept,
                                       kind=self.kind.view(-1).index_select(0, flat), batch_size=[b])
        self.t = self.t + 1
        self._quote()
        out = self._observation()
        done, reward = (self.t >= size).unsqueeze(-1), reward.float().unsqueeze(-1)
        out.update({"reward": reward, "episode_reward": self.episode_returns(reward), "done": done,
                    "terminated": done.clone()})
        return out

    # ------------------------------------------------------------------ helpers
    def _improve(self, size: Tensor) -> Tensor | float:
        """The km the local search saves after this step's booking (:mod:`envs.dvrp.local_search`): the tentative
        plan improved around the request in the rows whose booking count is a multiple of ``improve_every``, and the
        whole plan re-optimised in the rows at their cut-off (their day's last request). Which rows is known on the
        CPU for free; on an accelerator (deferred checks: no host read) the passes run every step, masked."""
        cfg, booked = self.config, self.t + 1
        saved = 0.0
        if cfg.improve_every:
            due = booked.remainder(cfg.improve_every) == 0
            if self.checks.defer or bool(due.any()):
                saved = self.oracle.improve(cfg.improve_passes, due, cfg.improve_reversal)
        if cfg.cutoff_sweeps:
            cutoff = booked >= size
            if self.checks.defer or bool(cutoff.any()):
                saved = saved + self.oracle.reoptimise(cutoff, cfg.cutoff_sweeps, cfg.cutoff_ruins,
                                                       cfg.cutoff_reversal)
        return saved

    def _quote(self) -> None:
        """Price the current request under every shift; refresh ``windows``, ``mask`` and ``offer_cost``."""
        n = self.config.num_customers
        live = self.t < self.size
        u = self._current()
        req = self.customers.view(-1, self.customers.shape[-1]).index_select(0, u)
        self._request = self.static.view(-1, self.static.shape[-1]).index_select(0, u)
        horizon = self.instances["horizon"].view(-1, 1, 1)
        shifted = req[:, None, _READY:_DUE + 1] + self._steps * req[:, _SLOT, None, None]  # [B, W, 2]
        self.windows = torch.minimum(shifted.clamp_min(0.0), horizon)
        quote = self.oracle.quote(self.t.clamp_max(n - 1), req[:, :2], req[:, _DEMAND], req[:, _SERVICE], self.windows)
        feasible = quote.feasible & (self.windows[..., 1] > self.windows[..., 0]) & live.unsqueeze(-1)
        if self.flexibility is not None:
            self._accept_p = self.acceptance.view(-1, self.num_windows).index_select(0, u)
            threshold = self.config.refusal_mask_threshold
            if threshold is not None:
                feasible = feasible & (1.0 - self._accept_p <= threshold)
        self.mask = torch.cat([feasible, self._ones], -1)
        self.offer_cost = torch.cat([torch.where(feasible, quote.delta, 0.0).float(), self._zeros], -1)

    def _observation(self) -> TensorDict:
        b, r = self.batch_size[0], self.config.served_reward
        n = self.size.unsqueeze(-1)
        inst = self.instances
        horizon = inst["horizon"].unsqueeze(-1)
        plan_cost = self.oracle.cost().float().unsqueeze(-1)
        served, refused = self.counts[:, :1], self.counts[:, 1:]
        t = self.t.unsqueeze(-1)
        progress = torch.cat([t / n, served / n, plan_cost / (n * r), (n - t) / 100.0], -1)
        windows = (self.windows / horizon.unsqueeze(-1)).float()
        width = (windows[..., 1:] - windows[..., :1]) / self._request[:, None, 6:7].clamp_min(1e-9)
        offered = torch.nn.functional.pad(torch.cat([windows, width], -1), (0, 0, 0, 1))  # reject row: zeros
        offers = [self._offer_const.expand(b, -1, -1), offered, (self.offer_cost / r).unsqueeze(-1),
                  self.mask.unsqueeze(-1).float()]
        if self.flexibility is not None:
            offers.append(torch.nn.functional.pad(self._accept_p, (0, 1)).unsqueeze(-1))
        offers = torch.cat(offers, -1)
        load, count, back = self.oracle.vehicles()
        in_fleet = (self._vehicle < self.fleet.unsqueeze(-1)).to(load.dtype)
        vehicles = torch.stack([load / inst["capacity"].unsqueeze(-1), count / n, back / horizon, in_fleet], -1).float()
        outcome = {} if self.flexibility is None else {"outcome": self._outcome}
        return TensorDict(
            customers=self.table,
            request=torch.cat([self._request * (t < n), progress], -1),
            offers=offers,
            vehicles=vehicles,
            depot=(inst["depot"] / COORD_SCALE).float(),
            action_mask=self.mask,
            offer_cost=self.offer_cost,
            info=TensorDict(plan_cost_km=plan_cost, served=served, failure_rate=(t - served) / n,
                              refused=refused, batch_size=[b]),
            **outcome,
            batch_size=[b],
        )

    def _predict(self, attributes: Tensor, idx: Tensor) -> list[Tensor]:
        """The flexibility model's p(k | x) and embedding of new rows ``idx``, as one ``[R, N, K + D]``
        block of table columns; also stores their predicted acceptance of every window, P(k >= |s| | x)
        ``[R, N, W]``. Rows restarted by a resume take the predictions they were saved with."""
        device = next(self.flexibility.parameters()).device
        with torch.no_grad():
            log_p, embedding = self.flexibility(attributes.float().to(device))
            accept = acceptance_log_prob(log_p.unsqueeze(-2), self._need[: self.num_windows].to(device)).exp()
        predictions = torch.cat([log_p.exp(), embedding], -1).to(self.device)
        accept = accept.to(self.device)
        if self._saved is not None:  # a resumed run restarts these episodes with their original predictions
            saved, saved_accept, pending = self._saved
            use = pending[idx]
            predictions = torch.where(use.view(-1, 1, 1), saved[idx], predictions)
            accept = torch.where(use.view(-1, 1, 1), saved_accept[idx], accept)
            pending[idx] = False
        self.acceptance[idx] = accept
        return [predictions]

    def _no_outcome(self, b: int, k: int) -> TensorDict:
        """An ``outcome`` with nothing offered (at reset)."""
        dev = self.device
        return TensorDict(attributes=torch.zeros(b, k, device=dev), shift=torch.zeros(b, dtype=torch.long, device=dev),
                          offered=torch.zeros(b, dtype=torch.bool, device=dev),
                          accepted=torch.zeros(b, dtype=torch.bool, device=dev),
                          kind=torch.zeros(b, dtype=torch.long, device=dev), batch_size=[b])

    # ------------------------------------------------------------------ references and exports
    def _current(self) -> Tensor:
        """Flat index ``[B]`` (into ``[B * N]``) of each row's current request (the last one at done)."""
        return self._row + self.t.clamp_max(self.config.num_customers - 1)

    def request_type(self) -> Tensor:
        """Hidden type k ``[B]`` of the current request (for the clairvoyant reference and diagnostics)."""
        return self.kind.view(-1).index_select(0, self._current())

    def request_posterior(self) -> Tensor:
        """Exact generator posterior p(k | attributes) ``[B, K]`` of the current request."""
        attributes = self._request[:, STATIC_FEATURES:STATIC_FEATURES + self.config.num_types]
        return type_posterior(attributes, self.type_mix, self.config.attribute_separation)

    def export_episodes(self, rows: list[int] | None = None) -> list[dict]:
        """The current plans of ``rows`` (default all) as plain JSON-able dicts (call at ``done``, before a reset).

        Each dict: ``depot`` {x, y, due}, ``capacity``, ``num_vehicles`` (the day's fleet), ``customers`` (served
        only, with ``id`` = arrival index + 1, x, y, demand, service_time and the agreed ``window`` [start, end]),
        ``routes`` (customer ids per vehicle in visiting order; depot implied at both ends) and ``cost_km``.
        """
        inst = self.instances.cpu().to(torch.float64) if self.dtype != torch.float64 else self.instances.cpu()
        routes, cost, fleet = self.oracle.routes().cpu(), self.oracle.cost().cpu(), self.fleet.cpu()
        status, agreed = self.status.cpu(), self.agreed.cpu().double()
        out = []
        for r in range(self.batch_size[0]) if rows is None else rows:
            served = (status[r] == SERVED).nonzero().squeeze(-1).tolist()
            out.append({
                "depot": {"x": float(inst["depot"][r, 0]), "y": float(inst["depot"][r, 1]),
                          "due": float(inst["horizon"][r])},
                "capacity": float(inst["capacity"][r]),
                "num_vehicles": int(fleet[r]),
                "customers": [{"id": i + 1, "x": float(inst["xy"][r, i, 0]), "y": float(inst["xy"][r, i, 1]),
                               "demand": float(inst["demand"][r, i]), "service_time": float(inst["service"][r, i]),
                               "window": [float(agreed[r, i, 0]), float(agreed[r, i, 1])]} for i in served],
                "routes": [[int(i) + 1 for i in route if i >= 0] for route in routes[r].tolist()],
                "cost_km": float(cost[r]),
            })
        return out

    def export_days(self, rows: list[int] | None = None) -> list[dict]:
        """The whole day of ``rows`` (default all) as plain dicts, hidden types included: the input of the
        hindsight oracle (:func:`envs.dvrp.hindsight.solve_hindsight`). Valid from the episode's reset to its
        ``done`` (before the next reset).

        Each dict: ``depot`` {x, y, due}, ``capacity``, ``num_vehicles`` (the day's fleet M) and ``requests``, the
        day's N requests in arrival order with ``id``
        = arrival index + 1, x, y, demand, service_time, the preferred ``window`` [e, l], the shift ``slot`` and the
        hidden type ``kind`` (it accepts shifts with |s| <= kind).
        """
        inst = self.instances.cpu().to(torch.float64)
        size, fleet = self.size.cpu(), self.fleet.cpu()
        out = []
        for r in range(self.batch_size[0]) if rows is None else rows:
            n = int(size[r])
            columns = [inst[key][r, :n].tolist() for key in ("demand", "service", "ready", "due", "slot")]
            xy, kind = inst["xy"][r].tolist(), inst["kind"][r].tolist()
            out.append({
                "depot": {"x": float(inst["depot"][r, 0]), "y": float(inst["depot"][r, 1]),
                          "due": float(inst["horizon"][r])},
                "capacity": float(inst["capacity"][r]),
                "num_vehicles": int(fleet[r]),
                "requests": [{"id": i + 1, "x": xy[i][0], "y": xy[i][1], "demand": demand, "service_time": service,
                              "window": [ready, due], "slot": slot, "kind": int(kind[i])}
                             for i, (demand, service, ready, due, slot) in enumerate(zip(*columns, strict=True))],
            })
        return out

    def render_frame(self, row: int = 0) -> np.ndarray:
        """Row ``row``'s plan now (:meth:`render_routes`): a video's frame, the plan growing over an episode."""
        return self.render_routes(row)

    def render_routes(self, row: int = 0) -> np.ndarray:
        """RGB image ``[H, W, 3]`` uint8 of row ``row``'s current plan (see :func:`plot_routes`)."""
        return plot_routes(self.export_episodes([row])[0])
