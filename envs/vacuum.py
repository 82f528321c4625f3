"""Multi-agent robot vacuum: R robots clean an n x n grid, as one natively batched TorchRL env.

The config (:class:`VacuumConfig`, the ``env:`` section of ``configs/vacuum.yaml``) and the env
(:class:`VacuumEnv`, ``batch_size=[B]``) live here. Every robot acts at every step; the env is written
for one shared replay buffer and a shared (or per-robot) Q-network: a robot's observation depends on the
robots only through their states, never through their indices (the index is the separate ``agent_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Binary, Categorical, Composite, Unbounded

from envs import rng
from envs.compat import new_tensordict
from envs.config import EnvConfig, require
from envs.seeding import NativeBatchedEnv
from envs.vacuum_render import draw_grid

NUM_ACTIONS = 5
STAY, UP, DOWN, LEFT, RIGHT = range(NUM_ACTIONS)
# (row, column) change of each action; row 0 is the top row, so "up" decreases the row
ACTION_DELTAS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))
INFO_KEYS = ("cleaned_fraction", "collisions", "energy_left", "steps")
_POSITION_STREAM = 0  # rng stream of the initial positions


@dataclass(eq=False)
class VacuumConfig(EnvConfig):
    """Parameters of the robot-vacuum problem; the defaults follow the original four-robot system.

    Args:
        grid_size: n, the grid is n x n cells (all dirty when an episode starts).
        num_robots: R, robots per env (at most n * n: they start on distinct cells).
        energy: initial (= maximum) energy of each robot, one positive number per robot (energy units;
            one move costs ``e_move``). Default robot 0: 1000, robots 1-3: 100.
        chargers: charger cells as ``[row, column]`` pairs, 0-based, row 0 at the top; distinct, inside
            the grid; may be empty.
        r_clean: reward to a robot for each dirty cell it cleans.
        e_move: energy an attempted move costs (a move off the grid is a stay and costs nothing).
        e_collision: energy each robot of a colliding pair loses (on top of the move).
        e_charge: energy a robot on a charger gains per step, capped at its initial energy.
        max_steps: episode length limit (env steps); the episode is truncated there.

    Raises:
        ValueError: a key out of its allowed range; the message names the key (``env.<key>``) and what is
            allowed, e.g. an ``energy`` list whose length is not ``num_robots``, or a charger outside the grid.
    """

    grid_size: int = 5
    num_robots: int = 4
    energy: Sequence[float] = (1000.0, 100.0, 100.0, 100.0)
    chargers: Sequence[Sequence[int]] = ((2, 2),)
    r_clean: float = 1.0
    e_move: float = 1.0
    e_collision: float = 20.0
    e_charge: float = 20.0
    max_steps: int = 100

    def __post_init__(self) -> None:
        """Check every key (before any work); energies become a list of floats, chargers a list of (row, column)."""
        grid_size, num_robots = self.grid_size, self.num_robots
        require(isinstance(grid_size, int) and grid_size >= 1, "grid_size", grid_size, "an integer >= 1")
        cells = grid_size * grid_size
        require(isinstance(num_robots, int) and 1 <= num_robots <= cells, "num_robots", num_robots,
                f"an integer in [1, grid_size**2 = {cells}] (robots start on distinct cells)")
        energy = [float(e) for e in self.energy]
        require(len(energy) == num_robots, "energy", energy,
                f"one initial energy per robot: {num_robots} values for num_robots={num_robots}, got {len(energy)}")
        require(all(e > 0 for e in energy), "energy", energy, "every initial energy must be > 0")
        chargers = [tuple(int(v) for v in c) for c in self.chargers]
        for c in chargers:
            require(len(c) == 2 and all(0 <= v < grid_size for v in c), "chargers", [list(x) for x in chargers],
                    f"[row, column] pairs inside the {grid_size}x{grid_size} grid (0..{grid_size - 1}); "
                    f"{list(c)} is not")
        require(len(set(chargers)) == len(chargers), "chargers", [list(x) for x in chargers], "distinct cells")
        for key in ("e_move", "e_collision", "e_charge"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(isinstance(self.max_steps, int) and self.max_steps >= 1, "max_steps", self.max_steps,
                "an integer >= 1")
        self.energy, self.chargers = energy, chargers
        for key in ("r_clean", "e_move", "e_collision", "e_charge"):
            setattr(self, key, float(getattr(self, key)))

    @property
    def num_agents(self) -> int:
        """R: the robots are the agents (see ``EnvConfig.num_agents``)."""
        return self.num_robots

    @property
    def num_cells(self) -> int:
        """n * n."""
        return self.grid_size * self.grid_size

    @property
    def num_features(self) -> int:
        """F, the width of ``observation``: 3 R + 7 + n^2 + 2 K for K chargers (46 for the defaults)."""
        return 3 * self.num_robots + 7 + self.num_cells + 2 * len(self.chargers)

    def make(self, num_envs: int, seed: int, device: torch.device | str = "cpu",
             models: dict | None = None) -> VacuumEnv:
        self.check_models(models)  # none
        return VacuumEnv(self, num_envs=num_envs, seed=seed, device=device)


class VacuumEnv(NativeBatchedEnv):
    """B independent robot-vacuum episodes stepping as one batch (``batch_size=[B]``), R robots each.

    Cells are numbered row-major, ``cell = row * n + column``, row 0 at the top.

    Actions:
        ``action`` int64 ``[B, R]`` in ``[0, 5)``: 0 stay, 1 up (row - 1), 2 down, 3 left (column - 1),
        4 right. A move off the grid is a stay; a stopped robot's action is ignored (it stays).

    Observations (float32 unless noted):
        * ``observation`` ``[B, R, F]``, F = 3 R + 7 + n^2 + 2 K (46 for the defaults). Robot i's row,
          with ``E`` = the largest initial energy of the config and ``s`` = max(n - 1, 1):

          - ``[0]`` own energy / E; ``[1 : R]`` the other robots' energies / E, others in increasing
            index order (i skipped); ``[R]`` own initial (maximum) energy / E;
          - ``2 (R - 1)`` the other robots' offsets from the own cell, (row_j - row_i) / s,
            (col_j - col_i) / s, same order as their energies;
          - ``5`` dirt (1 = dirty) of the cell each action leads to (stay, up, down, left, right; an
            off-grid move leads to the own cell);
          - own row / s, own column / s;
          - ``2 K`` chargers, in config order, as offsets from the own cell: (row - own row) / s,
            (column - own column) / s (the charger map is fixed by the config, so an absolute map
            would carry nothing; the offsets tell where to go, and (0, 0) means "on a charger");
          - ``n^2`` dirt map (1 = dirty), absolute, row-major; then steps left / ``max_steps``.

          The own cell is given by its coordinates, not by a one-hot map: n^2 more floats per robot
          cost about a third of the env's throughput (the observation is most of the bytes written).
          The row depends on the robots only through their states (cells, energies, initial
          energies): exchanging two robots' states exchanges their rows, and robot i sees the others
          in increasing index order, so one robot's transitions are valid training data for another.
        * ``agent_id`` ``[B, R, R]``: one-hot of the robot index (for a shared network that wants it).
        * ``action_mask`` bool ``[B, R, 5]`` (True = allowed): stay always; a move if it stays on the
          grid and the robot is not stopped (a stopped robot may only stay).
        * ``info``: ``cleaned_fraction`` (clean cells / n^2), ``collisions`` (colliding pairs so far in
          the episode), ``energy_left`` (mean over robots of energy / initial energy) and ``steps`` (steps
          taken in the episode), each ``[B, 1]``; ``robot_energy_left`` ``[B, R]`` (each robot's energy /
          its initial energy).

    Rules of a step (all robots at once; a robot with energy 0 is *stopped*):
        1. Each active robot's action gives its target cell (off the grid: its own cell). A robot whose
           target differs from its cell *attempts a move* and pays ``e_move``, whatever happens next.
        2. Collisions (:meth:`_resolve`): a mover fails when another mover targets the same cell, when
           the robot in its target cell stays (stopped, not moving, or itself failed), or when it and
           that robot would swap cells. Failed movers stay. Each colliding pair (movers with the same target cell,
           a failed mover and the robot staying in its target cell, a swapping pair) costs each of its
           two robots ``e_collision`` (a robot in several pairs pays once). Following a robot that
           leaves its cell, and rotating around a 2 x 2 block, are allowed. Failures propagate down
           chains of movers in R - 1 fixed passes, which is exact (a chain has at most R - 1 links).
        3. Energy is clamped at 0, then every robot on a charger gains ``e_charge``, capped at its
           initial energy (so a robot that reaches a charger with its last unit keeps going).
        4. Every robot on a dirty cell cleans it and earns ``r_clean`` (a robot that stays cleans its
           cell too; at the first step the start cells are still dirty).

    Reward:
        ``[B, R, 1]``: ``r_clean`` to the robot that cleaned a cell this step, else 0.

    Termination:
        ``terminated`` when the floor is clean or every robot is stopped; ``truncated`` after
        ``max_steps`` steps when not terminated; ``done = terminated | truncated``; each ``[B, 1]``,
        shared by the robots.

    Seeding:
        Each episode starts with full energy, all cells dirty and the robots on R distinct cells drawn
        uniformly (robot k gets the cell with the k-th largest of n^2 counter-based uniform draws of
        :mod:`envs.rng`, keyed by the row seed and the row's episode index). Row b of an env seeded
        ``s`` plays the episodes of a single env seeded ``s + b``, whatever the batch size.

    State (read it, don't write it; :meth:`force_state` sets it): ``position`` int64 ``[B, R]`` (cells),
    ``energy`` float32 ``[B, R]``, ``dirt`` float32 ``[B, n^2]`` (1 = dirty), ``t`` int64 ``[B]`` (steps
    taken), ``collisions`` float32 ``[B]`` (colliding pairs in the episode). A step or reset may update
    these tensors in place (``dirt`` at every step, the reset rows of all of them at a reset): clone one
    to keep a snapshot.

    Args:
        config: the problem's parameters.
        num_envs: B.
        seed: seed of row 0.
        device: torch device of all tensors.

    Raises:
        ValueError: ``num_envs < 1``.
    """

    batch_locked = True

    def __init__(self, config: VacuumConfig, num_envs: int = 1, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)  # checks num_envs >= 1
        self.config = config
        b, r, n, c = num_envs, config.num_robots, config.grid_size, config.num_cells
        dev = self.device
        # ---- constant tables, indexed by cell (and robot) so that a step is mostly table look-ups
        rows = torch.arange(c, device=dev) // n
        cols = torch.arange(c, device=dev) % n
        delta = torch.tensor(ACTION_DELTAS, device=dev)
        next_r, next_c = rows[:, None] + delta[:, 0], cols[:, None] + delta[:, 1]
        on_grid = (next_r >= 0) & (next_r < n) & (next_c >= 0) & (next_c < n)  # [C, 5]
        self._next_cell = torch.where(on_grid, next_r * n + next_c, torch.arange(c, device=dev)[:, None])
        self._next_flat = self._next_cell.reshape(-1)  # cell * 5 + action -> cell
        # cell * 2 + is_active -> action mask [5]: stay always, moves on the grid when active
        self._mask_table = torch.stack([on_grid & (torch.arange(NUM_ACTIONS, device=dev) == STAY), on_grid], 1)
        self._mask_table = self._mask_table.reshape(2 * c, NUM_ACTIONS)
        scale = float(max(n - 1, 1))
        self._coords = torch.stack([rows, cols], -1).float() / scale  # [C, 2]
        self._is_charger = torch.zeros(c, dtype=torch.bool, device=dev)
        for row, col in config.chargers:
            self._is_charger[row * n + col] = True
        self._max_energy = torch.tensor(config.energy, dtype=torch.float32, device=dev)  # [R]
        self._energy_scale = float(max(config.energy))
        self._layout = self._observation_layout(config, scale)
        self._agent_id = torch.eye(r, device=dev).expand(b, r, r)
        self._max_energy_rows = self._max_energy.expand(b, r).contiguous()  # same-shape ops are the fast ones
        self._ones_column = torch.ones(b, 1, device=dev)  # the constant input of the layout matrix's bias row
        # scratch constants of the collision resolution and of the cleaning (cloned or read, never written)
        small = torch.int8 if r < 127 else torch.int32
        self._nobody = torch.full((b, c), r, dtype=small, device=dev)
        self._robot_index = torch.arange(r, dtype=small, device=dev).expand(b, r).contiguous()
        self._robot_long = torch.arange(r, device=dev).expand(b, r).contiguous()
        self._no_movers = torch.zeros(b, c + 1, dtype=small, device=dev)
        self._ones_small = torch.ones(b, r, dtype=small, device=dev)
        # scatter_ from a tensor is about 3x faster than scatter_ of a Python scalar on CPU
        self._zeros = torch.zeros(b, r, device=dev)
        # ---- state
        self.position = torch.arange(r, device=dev).expand(b, r).contiguous()
        self.energy = self._max_energy.expand(b, r).clone()
        self.dirt = torch.ones(b, c, device=dev)
        self._dirty = torch.full((b,), float(c), device=dev)  # dirty cells per row, = dirt.sum(-1)
        self.t = torch.zeros(b, dtype=torch.long, device=dev)
        self.collisions = torch.zeros(b, dtype=torch.float32, device=dev)
        self.row_seed = torch.zeros(b, dtype=torch.long, device=dev)
        self.episode = torch.zeros(b, dtype=torch.long, device=dev)
        self._fresh_dirt = torch.ones(b, c, device=dev)  # the dirt and steps of a new episode (never written)
        self._fresh_t = torch.zeros(b, dtype=torch.long, device=dev)
        # partial resets write their new rows here (see _reset); TorchRL keeps the other rows from its input
        self._reset_rows = torch.zeros(b, r, config.num_features, device=dev)
        self._set_seed(seed)
        self._make_specs(b, r, config.num_features)

    # ------------------------------------------------------------------ specs
    def _make_specs(self, b: int, r: int, f: int) -> None:
        f32 = {"dtype": torch.float32, "device": self.device}
        self.observation_spec = Composite(
            observation=Unbounded(shape=(b, r, f), **f32),
            agent_id=Unbounded(shape=(b, r, r), **f32),
            action_mask=Binary(n=NUM_ACTIONS, shape=(b, r, NUM_ACTIONS), dtype=torch.bool, device=self.device),
            info=Composite({**{key: Unbounded(shape=(b, 1), **f32) for key in INFO_KEYS},
                              "robot_energy_left": Unbounded(shape=(b, r), **f32)}, shape=(b,)),
            shape=(b,),
        )
        self.action_spec = Categorical(n=NUM_ACTIONS, shape=(b, r), device=self.device)
        self.reward_spec = Unbounded(shape=(b, r, 1), **f32)
        self.add_episode_reward_spec()
        flag = {"n": 2, "shape": (b, 1), "dtype": torch.bool, "device": self.device}
        self.done_spec = Composite(done=Categorical(**flag), terminated=Categorical(**flag),
                                   truncated=Categorical(**flag), shape=(b,))

    def _observation_layout(self, config: VacuumConfig, scale: float) -> Tensor:
        """Matrix ``[8 R + n^2 + 2, R F]`` mapping a row's [energies (R) | cell coordinates (row / s,
        column / s per robot, 2 R) | dirt ahead (5 per robot, 5 R) | dirt map (n^2) | steps left / max_steps
        | 1] to the observation rows of all its robots, ``[R, F]`` flattened (layout in the class
        docstring). The last input is the constant 1: its row is the bias (own initial energy, charger cells).
        """
        r, c, e = config.num_robots, config.num_cells, self._energy_scale
        inputs = 8 * r + c + 2
        weight = torch.zeros(inputs, r, config.num_features, dtype=torch.float64)
        xy, ahead, shared, one = r, 3 * r, 8 * r, inputs - 1  # input offsets
        for i in range(r):
            others = [j for j in range(r) if j != i]
            weight[i, i, 0] = 1.0 / e
            for m, j in enumerate(others):
                weight[j, i, 1 + m] = 1.0 / e
            weight[one, i, r] = config.energy[i] / e
            for m, j in enumerate(others):
                for d in (0, 1):
                    weight[xy + 2 * j + d, i, r + 1 + 2 * m + d] = 1.0
                    weight[xy + 2 * i + d, i, r + 1 + 2 * m + d] = -1.0
            at = 3 * r - 1
            for a in range(NUM_ACTIONS):
                weight[ahead + NUM_ACTIONS * i + a, i, at + a] = 1.0
            at += NUM_ACTIONS
            for d in (0, 1):
                weight[xy + 2 * i + d, i, at + d] = 1.0
            at += 2
            for q, charger in enumerate(config.chargers):
                for d in (0, 1):
                    weight[xy + 2 * i + d, i, at + 2 * q + d] = -1.0
                    weight[one, i, at + 2 * q + d] = charger[d] / scale
            at += 2 * len(config.chargers)
            for m in range(c + 1):  # dirt map, steps left: copied
                weight[shared + m, i, at + m] = 1.0
        return weight.reshape(inputs, -1).to(dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ state (tests, diagnostics)
    def render_frame(self, row: int = 0) -> np.ndarray:
        """Row ``row``'s grid now, ``[H, W, 3]`` uint8 (:func:`envs.vacuum_render.draw_grid`; a video's frame)."""
        return draw_grid(self.config.grid_size, self.dirt[row].cpu().numpy(), self._is_charger.cpu().numpy(),
                         self.position[row].cpu().numpy(), self.energy[row].cpu().numpy(),
                         self._max_energy.cpu().numpy())

    def force_state(self, position: Tensor, energy: Tensor, dirt: Tensor, t: Tensor | int = 0,
                    collisions: Tensor | float = 0.0) -> TensorDict:
        """Test and diagnostic hook: overwrite the state of every row and return its observation (the
        TensorDict a reset would return: set ``action`` in it and call :meth:`step`).

        Args:
            position: int64 ``[B, R, 2]`` (row, column) of each robot, distinct per row, inside the grid.
            energy: ``[B, R]`` energy of each robot (0 = stopped; may exceed the initial energy).
            dirt: bool ``[B, n, n]``, True = dirty.
            t: steps already taken, int or int64 ``[B]``.
            collisions: colliding pairs so far in the episode, float or ``[B]``.

        Raises:
            ValueError: a shape that does not match, a position outside the grid, or two robots on one cell.
        """
        b, r, n = self.batch_size[0], self.config.num_robots, self.config.grid_size
        position = torch.as_tensor(position, device=self.device).long()
        energy = torch.as_tensor(energy, dtype=torch.float32, device=self.device)
        dirt = torch.as_tensor(dirt, device=self.device).bool()
        if position.shape != (b, r, 2) or energy.shape != (b, r) or dirt.shape != (b, n, n):
            raise ValueError(f"force_state wants position [{b}, {r}, 2], energy [{b}, {r}], dirt [{b}, {n}, {n}]; got "
                             f"{list(position.shape)}, {list(energy.shape)}, {list(dirt.shape)}")
        if bool(((position < 0) | (position >= n)).any()):
            raise ValueError(f"force_state: positions must lie in 0..{n - 1}")
        cells = position[..., 0] * n + position[..., 1]
        if bool(((cells[:, :, None] == cells[:, None, :]).sum((-2, -1)) > r).any()):
            raise ValueError("force_state: two robots on one cell")
        self.position = cells
        self.energy = energy.clamp_min(0.0).clone()
        self.dirt = dirt.reshape(b, -1).float()
        self._dirty = self.dirt.sum(-1)
        self.t = torch.as_tensor(t, dtype=torch.long, device=self.device).expand(b).clone()
        self.collisions = torch.as_tensor(collisions, dtype=torch.float32, device=self.device).expand(b).clone()
        return self._observation(self._features(self.position, self.energy, self.dirt, self.t))

    # ------------------------------------------------------------------ dynamics
    def _reset(self, tensordict: TensorDict | None = None, **kwargs) -> TensorDict:
        b, r, c = self.batch_size[0], self.config.num_robots, self.config.num_cells
        _, idx, _, keys = self.start_episodes(tensordict)
        position = rng.uniform(keys, _POSITION_STREAM, (c,)).topk(r, dim=-1).indices
        energy = self._max_energy.expand(idx.shape[0], r)
        # in place (cheaper than out-of-place copies of every state tensor); see "State" in the class docstring
        self.position.index_copy_(0, idx, position)
        self.energy.index_copy_(0, idx, energy)
        for state, value in ((self.dirt, 1.0), (self._dirty, float(c)), (self.t, 0), (self.collisions, 0.0)):
            state.index_fill_(0, idx, value)
        if idx.shape[0] == b:
            return self._observation(self._features(self.position, self.energy, self.dirt, self.t))
        # A partial reset computes only the new rows, into a scratch buffer: TorchRL's reset takes the
        # rows that are not reset from its input (``_update_during_reset`` merges into new tensors), so
        # the other rows of this buffer (stale, finite) are never seen, and no full-size copy is made.
        # The small entries (mask, info, returns) are computed for every row: maybe_reset takes them whole.
        n = idx.shape[0]
        fresh = self._features(position, energy, self._fresh_dirt[:n], self._fresh_t[:n])
        return self._observation(self._reset_rows.index_copy_(0, idx, fresh))

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``EnvBase.maybe_reset`` (start new episodes in the finished rows of ``step_mdp``'s output), with the
        same result (``tests/envs/test_vacuum.py``) at less cost: TorchRL merges its reset output into the step's
        with a ``where`` over every entry (1.7 of 4.6 ms of a B = 4096 step here); this env's state-derived
        entries (mask, info, returns) are already current for every row after :meth:`_reset`, so only the
        observation is merged, by copying the finished rows into a copy of it. (The last ``action`` stays as it
        was in every row; TorchRL zeroes it in the rows a partial reset starts. The policy writes the next one
        either way.)"""
        done = tensordict.get("done").reshape(-1)
        if not bool(done.any()):
            return tensordict
        fresh = self._reset(new_tensordict({"_reset": done.unsqueeze(-1)}, self.batch_size))
        rows = done.nonzero().squeeze(-1)
        observation = tensordict.get("observation").index_copy(0, rows, fresh.get("observation").index_select(0, rows))
        out = tensordict.copy()
        for key in ("done", "terminated", "truncated"):
            out.set(key, torch.zeros_like(tensordict.get(key)))
        out.update(fresh.exclude("observation"))
        out.set("observation", observation)
        return out

    def _step(self, tensordict: TensorDict) -> TensorDict:
        cfg = self.config
        b, r = self.batch_size[0], cfg.num_robots
        position, energy = self.position, self.energy
        action = tensordict.get("action").reshape(b, r) * (energy > 0)  # a stopped robot stays
        target = self._next_flat.index_select(0, (position * NUM_ACTIONS + action).view(-1)).view(b, r)
        attempted = target != position
        moving, collided, pairs = self._resolve(position, target, attempted)
        position = torch.where(moving, target, position)
        # (energy - e_move [attempted] - e_collision [collided]) clamped at 0; ``alpha * 0/1`` is exact
        energy = energy.sub(attempted.float(), alpha=cfg.e_move).sub_(collided.float(), alpha=cfg.e_collision)
        energy = energy.clamp_min_(0.0)
        on_charger = self._is_charger.index_select(0, position.view(-1)).view(b, r)
        energy = torch.where(on_charger, torch.minimum(energy + cfg.e_charge, self._max_energy_rows), energy)
        # dirt is written in place (the biggest state; it is never handed out: the observation copies it)
        cleaned = self.dirt.gather(1, position)
        self.dirt.scatter_(1, position, self._zeros)
        self._dirty = self._dirty - cleaned.sum(-1)  # robots are on distinct cells
        self.position, self.energy = position, energy
        self.collisions = self.collisions + pairs
        self.t = self.t + 1
        terminated = ((self._dirty == 0) | (energy.amax(-1) <= 0)).unsqueeze(-1)
        truncated = (self.t >= cfg.max_steps).unsqueeze(-1) & ~terminated
        return self._observation(
            self._features(position, energy, self.dirt, self.t),
            reward=(cleaned * cfg.r_clean).unsqueeze(-1), done=terminated | truncated,
            terminated=terminated, truncated=truncated,
        )

    def _resolve(self, position: Tensor, target: Tensor, attempted: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The collision rule (step 2 of the class docstring) for all rows and robots at once.

        A mover fails when another mover targets the same cell (*crowded*), when the robot in its target
        cell does not move (*blocked*), when it and that robot would swap, or when the robot in its
        target cell is a mover that fails (propagated down chains of movers: a chain has at most R - 1
        links, so R - 1 passes are exact). A failed mover collides with the movers it was crowded with
        and with the robot that stays in its target cell.

        Args:
            position: int64 ``[B, R]`` current cells (distinct per row).
            target: int64 ``[B, R]`` cells the actions lead to (``position`` for robots that stay).
            attempted: bool ``[B, R]``, ``target != position``.

        Returns:
            ``moving`` bool ``[B, R]`` (robots whose move succeeds), ``collided`` bool ``[B, R]``
            (robots in at least one colliding pair) and ``pairs`` float32 ``[B]`` (colliding pairs).
        """
        r, c = self.config.num_robots, self.config.num_cells
        me = self._robot_long
        # the robot in each robot's target cell; an empty cell reads the robot itself (a link to itself
        # changes nothing below), and so does a robot that stays
        ahead = self._nobody.clone().scatter_(1, position, self._robot_index).gather(1, target).long()
        occupied = ahead != r
        ahead = torch.where(occupied, ahead, me)
        # movers per target cell, robots that stay counted in the sink column c
        sink = torch.where(attempted, target, c)
        movers = self._no_movers.clone().scatter_add_(1, sink, self._ones_small)
        crowd = movers.gather(1, sink)
        crowded = (crowd > 1) & attempted
        ahead_moves = attempted.gather(1, ahead)
        swap = attempted & ahead_moves & (target.gather(1, ahead) == position)
        fail = crowded | swap | (attempted & occupied & ~ahead_moves)
        for _ in range(r - 1):
            fail = fail | fail.gather(1, ahead)  # a robot that stays never fails: no mask needed
        moving = attempted & ~fail
        # A robot that does not move is hit by every mover that targets its cell (each of them is
        # blocked, so fails): a failed mover and the robot staying in its target cell are one pair.
        hit_by = movers.gather(1, position) * ~moving
        # twice the pairs: k movers with one target make k (k - 1) / 2 pairs, i.e. k - 1 halves per
        # mover; a hit is a pair, counted from the robot hit; a swapping pair is hit both ways
        halves = torch.where(crowded, crowd - 1, 0) + hit_by * 2 - swap.to(hit_by.dtype)
        return moving, fail | (hit_by > 0), halves.sum(-1) * 0.5

    # ------------------------------------------------------------------ observation
    def _features(self, position: Tensor, energy: Tensor, dirt: Tensor, t: Tensor) -> Tensor:
        """``observation`` ``[k, R, F]`` of k rows' state (``position``, ``energy`` ``[k, R]``, ``dirt``
        ``[k, n^2]``, ``t`` ``[k]``); layout in the class docstring.

        The observation is linear in (energies, cell coordinates, dirt ahead, dirt map, steps left) of
        the row's robots, so one ``mm`` with a 0 / +-1 / 1/E matrix (:meth:`_observation_layout`) writes
        every robot's row at once. Every entry has at most two non-zero terms, so it is exact and does
        not depend on the batch size. One contiguous write is what is fast here: assembling the rows
        from blocks (``cat``, slice copies) costs more than the matrix product, because each robot row
        is a separate short copy.
        """
        cfg = self.config
        k, r = position.shape[0], cfg.num_robots
        flat = position.reshape(-1)
        xy = self._coords.index_select(0, flat).view(k, 2 * r)
        ahead = dirt.gather(1, self._next_cell.index_select(0, flat).view(k, r * NUM_ACTIONS))
        steps_left = (1.0 - t.float() / cfg.max_steps).unsqueeze(-1)
        inputs = torch.cat([energy, xy, ahead, dirt, steps_left, self._ones_column[:k]], 1)
        return inputs.mm(self._layout).view(k, r, cfg.num_features)

    def _observation(self, observation: Tensor, **step: Tensor) -> TensorDict:
        """The observation TensorDict of the current state, around ``observation`` ``[B, R, F]``, with the running
        episodes' returns (per robot, ``[B, R, 1]``), plus the ``step`` entries (reward and done flags)."""
        b, c = self.batch_size[0], self.config.num_cells
        key = (self.position * 2).add_(self.energy > 0)  # cell * 2 + is_active
        mask = self._mask_table.index_select(0, key.view(-1)).view(b, -1, NUM_ACTIONS)
        energy_left = self.energy / self._max_energy_rows
        info = {
            "cleaned_fraction": (1.0 - self._dirty / c).unsqueeze(-1),  # = 1 - dirt.mean(-1), bit for bit
            "collisions": self.collisions.unsqueeze(-1).clone(),
            "energy_left": energy_left.mean(-1, keepdim=True),
            "steps": self.t.unsqueeze(-1).float(),
            "robot_energy_left": energy_left,
        }
        # _new_unsafe skips the checks of TensorDict(...): every entry is built here with batch size [B]
        return new_tensordict(
            {"observation": observation, "agent_id": self._agent_id.clone(), "action_mask": mask,
             "info": info, "episode_reward": self.episode_returns(step.get("reward")), **step},
            self.batch_size, self.device,
        )


__all__ = ["ACTION_DELTAS", "NUM_ACTIONS", "VacuumConfig", "VacuumEnv"]
