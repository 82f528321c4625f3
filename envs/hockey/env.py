"""The hockey env: two-player air hockey as one natively batched TorchRL env (see :mod:`envs.hockey`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Bounded, Categorical, Composite, Unbounded

from envs import rng
from envs.compat import new_tensordict
from envs.config import require
from envs.hockey.constants import (
    ACTION_SIZE,
    CLOSENESS_PER_METRE_STEP,
    DISCRETE_ACTIONS,
    GOAL_HALF_WIDTH,
    INFO_KEYS,
    MAX_PUCK_SPEED,
    MAX_TIME_KEEP_PUCK,
    MIRROR_INDEX,
    MIRROR_SIGN,
    MODES,
    NORMAL,
    NUM_DISCRETE_ACTIONS,
    OBSERVATION_SIZE,
    OPPONENT_GAINS,
    OPPONENTS,
    PHASE_STEP_MAX,
    PLAYER_START,
    POLICY,
    PUCK_Y_LIMIT,
    SHOT_SPEED,
    TRAIN_DEFENSE,
    Mode,
    OpponentPolicy,
    discrete_to_continuous,
)
from envs.hockey.opponents import scripted_rows
from envs.hockey.puck import (
    catches,
    collide,
    contacts,
    fly_puck,
    hold_puck,
    puck_damping,
    touch_rackets,
    walls_and_goals,
)
from envs.hockey.rackets import move_rackets
from envs.hockey.render import draw_frame
from envs.hockey.render import render_game as draw_game
from envs.hockey.restore import checked_games
from envs.seeding import NativeBatchedEnv

_U_PLAYER2_X, _U_PLAYER2_Y, _U_PUCK_X, _U_PUCK_Y, _U_SHOT_Y, _U_PHASE = range(6)
_RESET_STREAM, _PHASE_STREAM = 0, 1
# what a resumed run's games go on from (HockeyEnv.resume_state); the rest is derived from it or set by the run
_GAME_STATE = ("players", "puck", "spin", "_kick", "hold", "touching", "t", "phase", "_keys", "episode", "mode",
               "opponent", "_next_mode", "_next_opponent")


class HockeyParameters(Protocol):
    """What :class:`HockeyEnv` reads of its config: the fields of :class:`envs.hockey.config.HockeyConfig`, which
    builds the env (so this module does not import that one)."""

    mode: Mode
    opponent: str
    discrete_actions: bool
    keep_mode: bool
    contact: str
    max_steps: int
    max_steps_train: int
    r_win: float
    w_closeness: float
    w_touch: float
    w_direction: float


class HockeyEnv(NativeBatchedEnv):
    """B independent hockey games stepping as one batch (``batch_size=[B]``): the agent plays player 1 (left
    half, defends the goal at x < 0), player 2 is driven inside the step by each row's opponent.

    Actions:
        ``action`` ``[B, 4]`` float in ``[-1, 1]`` (values outside are clipped): x force, y force, torque,
        shoot (> 0.5 releases a held puck), in the agent's frame; or, with ``discrete_actions``, int64 ``[B]``
        in ``[0, 8)`` mapped by :data:`DISCRETE_ACTIONS`.

    Observations (float32):
        * ``observation`` ``[B, 18]``, the agent's (player 1's) view, table-centred metres, as the original:
          ``[0:2]`` own position, ``[2]`` own angle (rad), ``[3:5]`` own velocity (m/s), ``[5]`` own angular
          velocity (rad/s), ``[6:12]`` the same for the other player, ``[12:14]`` puck position, ``[14:16]`` puck
          velocity, ``[16]`` steps the own paddle still holds the puck (0 = not holding; 15 at the catch), ``[17]``
          the same for the other player.
        * ``observation_opponent`` ``[B, 18]``: player 2's view in its own frame, same layout (the original's
          ``obs_agent_two``: positions and velocities point-mirrored through the centre, blocks swapped), so
          one policy can play either side: ``observation_opponent`` of a state equals ``observation`` of the
          state rotated by pi with the players exchanged.
        * ``info``: ``winner`` (1 the agent scored, -1 the opponent scored, 0 none yet or a draw), ``won``,
          ``lost``, ``drawn`` (0/1; ``drawn`` = no goal, meaningful at the episode's end) and ``steps`` (steps of
          the episode so far), each ``[B, 1]``. Averaged over finished episodes they give the rates of games
          won, lost and drawn (logged as ``rollout/won``, ``eval/weak/lost`` ...: never a ``loss`` beside
          ``train/loss``).

    Rules of a step (the original's, see :mod:`envs.hockey` for how closely):
        1. Player 2's action comes from its row's opponent, from ``observation_opponent`` of the previous step:
           ``static`` (zeros), ``weak`` / ``strong`` (:func:`basic_opponent_action`), ``policy`` (the callable of
           :meth:`set_opponent_policy`, on the rows that use it). Its forces act mirrored in the world.
        2. Rackets move (:func:`~envs.hockey.rackets.move_rackets`): force 6000 * action on 58 kg, the speed rule,
           the centre-zone spring, the boundary rule, torque 400 * action, the angle spring beyond pi/3.
        3. Holding (``keep_mode``, :func:`~envs.hockey.puck.hold_puck`): a held puck's counter drops by 1; at 1,
           or when the holder's shoot > 0.5, the puck is shot from the racket's origin (60 m/s in the facing
           direction on top of the racket's velocity, counter 0); otherwise it sits on the racket's face
           (``HOLD_OFFSET`` ahead), pinned to the racket's velocity at the step's start and pushed by its change.
           A free puck is damped (0.05, or 10 when faster than 25 m/s at the step's start) and moves
           (:func:`~envs.hockey.puck.fly_puck`).
        4. Racket contact (:mod:`~envs.hockey.contact`, :func:`~envs.hockey.puck.collide`): a puck whose path
           reaches a racket stops on it; the next step is the contact: if nobody holds the puck and it moved
           towards the racket's goal at the step's start (``vx < 0.1`` for player 1, ``vx > -0.1`` for player 2)
           the racket catches it (counter 15, ``MAX_TIME_KEEP_PUCK``: held for 14 steps at most), and if they
           approach, Box2D's impulse (restitution, friction, spin) acts on both.
        5. The puck bounces off the walls (restitution and friction, :func:`~envs.hockey.puck.walls_and_goals`);
           in the goal mouth (``|y| < 1.25``) past ``|x| = 3.867`` it is a goal: +1 for player 1 at x > 0.

    Reward:
        ``[B, 1]``: ``r_win * winner + w_closeness * closeness + w_touch * touch + w_direction * direction`` with
        the original's terms: ``closeness`` = -14.4 * |agent - puck| / max_steps while the puck is in the agent's
        half with x velocity <= 0 (else 0); ``touch`` = 1 at the step the agent catches the puck; ``direction``
        = puck x velocity / (max_steps * 25). ``max_steps`` is the row's episode limit.

    Termination:
        ``terminated`` at a goal; ``truncated`` after the row's episode limit (``max_steps``, or
        ``max_steps_train`` in the training modes) when not terminated, a draw; ``done = terminated |
        truncated``; each ``[B, 1]``.

    Curriculum and self-play hooks (all per row, all applied at the row's next reset, so an episode is played
    under one setting): :meth:`set_mode`, :meth:`set_opponent`; :meth:`set_opponent_policy` sets the callable of
    the ``policy`` rows; :meth:`set_shaping` changes the reward weights at once.

    Seeding:
        Each episode's random start (player 2 and puck positions in the training modes, the puck's start and
        the defense shot's target, the scripted opponent's phase) is drawn with the counter-based generator of
        :mod:`envs.rng`, keyed by the row seed and the row's episode index: row b of an env seeded ``s``
        plays the episodes of a single env seeded ``s + b``, whatever the batch size (given the same actions,
        modes and opponents).

    State (read it, don't write it; :meth:`force_state` sets it), feature-major with the batch innermost (the
    fast layout for elementwise kernels on CPU): ``players`` ``[6, 2, B]`` (x, y, angle, vx, vy, omega of players
    1 and 2, world frame), ``puck`` ``[4, B]`` (x, y, vx, vy), ``spin`` ``[B]`` (the puck's angular velocity,
    rad/s, not observed, as in the original), ``touching`` ``[2, B]`` (the puck reached that racket in the last
    step: the contact is this step), ``hold`` ``[2, B]`` (steps left holding the puck),
    ``t`` int64 ``[B]`` (steps taken), ``mode``, ``opponent`` int64 ``[B]`` (indices into :data:`MODES`,
    :data:`OPPONENTS`). A step replaces these tensors; a reset writes the reset rows in place.

    Args:
        config: the parameters (a :class:`~envs.hockey.config.HockeyConfig`).
        num_envs: B.
        seed: seed of row 0.
        device: torch device of all tensors.

    Raises:
        ValueError: ``num_envs < 1``.
    """

    batch_locked = True

    def __init__(self, config: HockeyParameters, num_envs: int = 1, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(num_envs, device)  # checks num_envs >= 1
        self.config = config
        b, dev = num_envs, self.device
        f32 = {"dtype": torch.float32, "device": dev}
        # ---- constants, shaped [2, 1] (per player) to broadcast over the batch, which is the innermost dim

        def column(*values: float) -> Tensor:
            return torch.tensor(values, **f32).view(-1, 1)

        self._side = column(1.0, -1.0)  # player 2's own frame is the world rotated by pi
        self._mirror_index = torch.tensor(MIRROR_INDEX, device=dev)
        self._mirror_sign = torch.tensor(MIRROR_SIGN, **f32).view(-1, 1)
        self._discrete = DISCRETE_ACTIONS.to(dev)
        self._gain_table = torch.tensor([[0.0] * 3, [OPPONENT_GAINS["weak"] * g for g in (1.0, 0.2, 0.5)],
                                         [OPPONENT_GAINS["strong"] * g for g in (1.0, 0.2, 0.5)], [0.0] * 3], **f32)
        # ---- state, feature-major: elementwise ops on contiguous [2, B] / [B] planes are the fast ones on CPU
        self.players = torch.zeros(6, 2, b, **f32)  # x, y, angle, vx, vy, omega of players 1, 2 (world frame)
        self.players[0] = column(PLAYER_START[0], -PLAYER_START[0])
        self.puck = torch.zeros(4, b, **f32)  # x, y, vx, vy
        self.spin = torch.zeros(b, **f32)  # the puck's angular velocity (rad/s): friction spins it, and its rim rubs
        self._kick = torch.zeros(2, b, **f32)  # a TRAIN_DEFENSE shot's velocity, given in the episode's first step
        self.hold = torch.zeros(2, b, **f32)
        self.touching = torch.zeros(2, b, **f32)  # 1: the puck reached this racket in the last step (not yet hit)
        self.t = torch.zeros(b, dtype=torch.long, device=dev)
        self.phase = torch.zeros(b, **f32)
        self._keys = torch.zeros(b, dtype=torch.long, device=dev)  # each row's episode key (envs.rng)
        self.mode = torch.full((b,), MODES.index(config.mode), dtype=torch.long, device=dev)
        self.opponent = torch.full((b,), OPPONENTS.index(config.opponent), dtype=torch.long, device=dev)
        self._next_mode = self.mode.clone()
        self._next_opponent = self.opponent.clone()
        self._max_steps = torch.zeros(b, dtype=torch.long, device=dev)
        self._inv_max_steps = torch.zeros(b, **f32)
        self._opponent_gain = torch.zeros(3, b, **f32)
        self._opponent_policy: OpponentPolicy | None = None
        self._has_policy_rows = False
        self.r_win, self.w_closeness = config.r_win, config.w_closeness
        self.w_touch, self.w_direction = config.w_touch, config.w_direction
        self._opponent_rows = torch.zeros(OBSERVATION_SIZE, b, **f32)  # player 2's observation, feature-major
        self._set_seed(seed)
        self._apply_settings(torch.arange(b, device=dev))
        self._make_specs(b)

    # ------------------------------------------------------------------ specs
    def _make_specs(self, b: int) -> None:
        f32 = {"dtype": torch.float32, "device": self.device}
        self.observation_spec = Composite(
            observation=Unbounded(shape=(b, OBSERVATION_SIZE), **f32),
            observation_opponent=Unbounded(shape=(b, OBSERVATION_SIZE), **f32),
            info=Composite({key: Unbounded(shape=(b, 1), **f32) for key in INFO_KEYS}, shape=(b,)),
            shape=(b,),
        )
        if self.config.discrete_actions:
            self.action_spec = Categorical(n=NUM_DISCRETE_ACTIONS, shape=(b,), device=self.device)
        else:
            self.action_spec = Bounded(low=-1.0, high=1.0, shape=(b, ACTION_SIZE), **f32)
        self.reward_spec = Unbounded(shape=(b, 1), **f32)
        self.add_episode_reward_spec()
        flag = {"n": 2, "shape": (b, 1), "dtype": torch.bool, "device": self.device}
        self.done_spec = Composite(done=Categorical(**flag), terminated=Categorical(**flag),
                                   truncated=Categorical(**flag), shape=(b,))

    # ------------------------------------------------------------------ curriculum / self-play hooks
    def _rows(self, rows: Tensor | Sequence[int] | None) -> Tensor:
        """Row indices (int64) from None (all rows), a bool mask ``[B]`` or indices."""
        b = self.batch_size[0]
        if rows is None:
            return torch.arange(b, device=self.device)
        rows = torch.as_tensor(rows, device=self.device)
        if rows.dtype == torch.bool:
            if rows.shape != (b,):
                raise ValueError(f"a row mask must have shape [{b}], got {list(rows.shape)}")
            return rows.nonzero().squeeze(-1)
        rows = rows.long().reshape(-1)
        if bool(((rows < 0) | (rows >= b)).any()):
            raise ValueError(f"rows must lie in [0, {b}), got {rows.tolist()}")
        return rows

    @staticmethod
    def _codes(value: str | Sequence[str] | Tensor, names: tuple[str, ...], key: str, n: int,
               device: torch.device) -> Tensor:
        """int64 ``[n]`` codes of ``value`` (one name for all, one name per row, or codes)."""
        if isinstance(value, Tensor):
            codes = value.to(device=device, dtype=torch.long).reshape(-1)
            require(bool(((codes >= 0) & (codes < len(names))).all()), key, value.tolist(),
                     f"codes in [0, {len(names)}) for {list(names)}")
        else:
            values = [value] if isinstance(value, str) else list(value)
            for v in values:
                require(v in names, key, v, f"one of {list(names)}")
            codes = torch.tensor([names.index(v) for v in values], dtype=torch.long, device=device)
        if codes.shape[0] == 1:
            codes = codes.expand(n)
        require(codes.shape[0] == n, key, value, f"one value, or one per selected row ({n})")
        return codes

    @staticmethod
    def render_game(observation: Tensor, frames: int = 8) -> np.ndarray:
        """Snapshots of one game from its ``observation`` ``[T, 18]``, two rows of four at 24 pixels per metre
        (:func:`envs.hockey.render.render_game`; ``callbacks.PolicyEvaluation`` logs it as a TensorBoard image)."""
        return draw_game(observation, frames, pixels_per_metre=24.0, columns=4)

    def render_frame(self, row: int = 0, pixels_per_metre: float = 40.0) -> np.ndarray:
        """Row ``row``'s table now, ``[H, W, 3]`` uint8 (:func:`envs.hockey.render.draw_frame`; a video's frame)."""
        rows = torch.cat([self.players[:, 0], self.players[:, 1], self.puck, self.hold])  # [18, B]
        return draw_frame(rows[:, row], pixels_per_metre).numpy()

    def configure(self, mode: Mode | None = None, opponent: str | None = None, **shaping: float) -> None:
        """Runtime settings of every row (the protocol ``callbacks.CurriculumPhases`` and
        ``callbacks.PolicyEvaluation`` use): ``mode`` and ``opponent`` from each row's next reset on
        (:meth:`set_mode`, :meth:`set_opponent`), the reward weights ``r_win``, ``w_closeness``, ``w_touch``,
        ``w_direction`` from the next step on (:meth:`set_shaping`).

        Raises:
            ValueError: an unknown mode, opponent or setting, or a bad weight (the message names the key).
        """
        unknown = set(shaping) - {"r_win", "w_closeness", "w_touch", "w_direction"}
        if unknown:
            raise ValueError(f"env settings {sorted(unknown)} are not allowed: one of mode, opponent, r_win, "
                             f"w_closeness, w_touch, w_direction")
        if mode is not None:
            self.set_mode(mode)
        if opponent is not None:
            self.set_opponent(opponent)
        if shaping:
            self.set_shaping(**shaping)

    def set_mode(self, mode: Mode | Sequence[Mode] | Tensor, rows: Tensor | Sequence[int] | None = None) -> None:
        """Set the mode of ``rows`` (all by default) from their next reset on.

        Args:
            mode: a name of :data:`MODES`, one name per selected row, or int64 codes.
            rows: None (all rows), a bool mask ``[B]`` or row indices.

        Raises:
            ValueError: an unknown mode (names ``env.mode``) or bad rows.
        """
        idx = self._rows(rows)
        self._next_mode.index_copy_(0, idx, self._codes(mode, MODES, "mode", idx.shape[0], self.device))

    def set_opponent(self, opponent: str | Sequence[str] | Tensor, rows: Tensor | Sequence[int] | None = None) -> None:
        """Set who drives player 2 in ``rows`` (all by default) from their next reset on.

        Args:
            opponent: a name of :data:`OPPONENTS` (``static``, ``weak``, ``strong``, ``policy``: the callable of
                :meth:`set_opponent_policy`), one name per selected row, or int64 codes.
            rows: None (all rows), a bool mask ``[B]`` or row indices.

        Raises:
            ValueError: an unknown opponent (names ``env.opponent``) or bad rows.
        """
        idx = self._rows(rows)
        self._next_opponent.index_copy_(0, idx, self._codes(opponent, OPPONENTS, "opponent", idx.shape[0], self.device))

    def set_opponent_policy(self, policy: OpponentPolicy | None) -> None:
        """Set the callable that drives the ``policy`` rows (a learned snapshot, for self-play), at once.

        Args:
            policy: maps ``observation_opponent`` rows ``[k, 18]`` (player 2's own frame) to actions ``[k, 4]``
                in ``[-1, 1]`` (clipped), or int64 ``[k]`` discrete actions (mapped by :data:`DISCRETE_ACTIONS`).
                Called under ``torch.no_grad()`` at every step that has ``policy`` rows. None: such rows stand
                still.
        """
        self._opponent_policy = policy

    @property
    def opponent_policy(self) -> OpponentPolicy | None:
        """The callable that drives the ``policy`` rows (:meth:`set_opponent_policy`)."""
        return self._opponent_policy

    def set_shaping(self, r_win: float | None = None, w_closeness: float | None = None, w_touch: float | None = None,
                    w_direction: float | None = None) -> None:
        """Change reward weights from the next step on (None keeps a weight); see the class docstring.

        Raises:
            ValueError: a negative or non-finite weight (names ``env.<key>``).
        """
        for key, value in (("r_win", r_win), ("w_closeness", w_closeness), ("w_touch", w_touch),
                           ("w_direction", w_direction)):
            if value is not None:
                require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, key, value,
                         "a finite number >= 0 (the sign is part of the term)")
                setattr(self, key, float(value))

    @property
    def shaping(self) -> dict[str, float]:
        """The current reward weights."""
        return {"r_win": self.r_win, "w_closeness": self.w_closeness, "w_touch": self.w_touch,
                "w_direction": self.w_direction}

    def _apply_settings(self, idx: Tensor) -> None:
        """Make the pending mode and opponent of rows ``idx`` current (at their reset)."""
        self.mode.index_copy_(0, idx, self._next_mode.index_select(0, idx))
        self.opponent.index_copy_(0, idx, self._next_opponent.index_select(0, idx))
        self._derive_settings()

    def _derive_settings(self) -> None:
        """The per-row opponent gains and step limits of the current modes and opponents."""
        self._opponent_gain = self._gain_table.index_select(0, self.opponent).t().contiguous()
        self._has_policy_rows = bool((self.opponent == POLICY).any())
        cfg = self.config
        limit = torch.where(self.mode == NORMAL, cfg.max_steps, cfg.max_steps_train)
        self._max_steps = limit
        self._inv_max_steps = 1.0 / limit.float()

    # ------------------------------------------------------------------ resume
    def resume_state(self) -> dict:
        """What continues the games in progress exactly: the base's row seeds and episode positions, and under
        ``games`` every row's state (rackets, puck, spin, holding, steps, the scripted opponent's phase, the episode
        keys and counters), its current and pending mode and opponent, and the running returns."""
        games = {name: getattr(self, name).cpu().clone() for name in _GAME_STATE}
        games["returns"] = self.episode_returns().cpu().clone()
        return {**super().resume_state(), "games": games}

    def load_resume_state(self, state: dict, keep_row_seeds: bool = False) -> bool:
        """Restore :meth:`resume_state`: where the rows are the saved rows (same row seeds), the next full reset
        (the collector's first) hands out the saved state's observation and the games go on from it, under the saved
        settings; otherwise (another DDP rank's rows, or a state saved before ``games`` was kept) each row restarts
        its episode in progress (:meth:`NativeBatchedEnv.load_resume_state`).

        Returns:
            Whether the saved games go on here (not where the rows restart their episodes).

        Raises:
            RestoredStateError: the state was saved from an env with another batch size, or its games are not games
                this env can play (:func:`envs.hockey.restore.checked_games`: shapes, nan, positions off the table,
                counters past the episode limit, unknown modes or opponents).
        """
        go_on = super().load_resume_state(state, keep_row_seeds) and "games" in state
        if go_on:
            live = {name: getattr(self, name).cpu() for name in _GAME_STATE}
            live["returns"] = self.episode_returns().cpu()
            games = checked_games(state["games"], live, max(self.config.max_steps, self.config.max_steps_train))
            for name in _GAME_STATE:
                setattr(self, name, games[name].to(self.device).clone())
            self._returns = games["returns"].to(self.device).clone()
            self._derive_settings()
            self._go_on = True
        return go_on

    def _set_seed(self, seed: int | None) -> None:
        super()._set_seed(seed)
        self._go_on = False  # a seeded env starts its episodes afresh

    # ------------------------------------------------------------------ state (tests, diagnostics)
    def force_state(self, observation: Tensor, t: Tensor | int = 0) -> TensorDict:
        """Test and diagnostic hook (the original's ``set_state``): overwrite every row's state from an agent
        ``observation`` ``[B, 18]`` (layout in the class docstring; used as given, the puck without spin) and
        return the observation TensorDict a reset would return (set ``action`` in it and call :meth:`step`).

        Raises:
            ValueError: ``observation`` is not ``[B, 18]``.
        """
        b = self.batch_size[0]
        obs = torch.as_tensor(observation, dtype=torch.float32, device=self.device)
        if obs.shape != (b, OBSERVATION_SIZE):
            raise ValueError(f"force_state wants observation [{b}, {OBSERVATION_SIZE}], got {list(obs.shape)}")
        players = obs[:, :12].reshape(b, 2, 6).permute(2, 1, 0).contiguous()  # [6, 2, B]
        self.players = players
        self.puck = obs[:, 12:16].t().contiguous()
        self.spin = torch.zeros(b, dtype=torch.float32, device=self.device)
        self._kick = torch.zeros(2, b, dtype=torch.float32, device=self.device)
        self.hold = obs[:, 16:18].t().contiguous()
        self.touching = torch.zeros_like(self.hold)
        self.t = torch.as_tensor(t, dtype=torch.long, device=self.device).expand(b).clone()
        return self._output(torch.zeros(b, 1, dtype=torch.float32, device=self.device))

    # ------------------------------------------------------------------ dynamics
    def _reset(self, tensordict: TensorDict | None = None, **kwargs) -> TensorDict:
        b, dev = self.batch_size[0], self.device
        if self._go_on and (tensordict is None or "_reset" not in tensordict.keys()):
            self._go_on = False  # a resumed run's first reset: the restored games go on (load_resume_state)
            return self._output(torch.zeros(b, 1, dtype=torch.float32, device=dev))
        _, idx, episode, keys = self.start_episodes(tensordict)
        k = idx.shape[0]
        self._apply_settings(idx)
        u = rng.uniform(keys, _RESET_STREAM, (6,))
        mode = self.mode.index_select(0, idx)
        normal, defense = mode == NORMAL, mode == TRAIN_DEFENSE
        # player 1 at its start, player 2 at its start (NORMAL) or at a random place: the original's 4W/5 + U(-W/3,
        # W/6), H/2 + U(-H/4, H/4), which may lie in the centre zone or in the wall (the first step moves it out)
        p2 = torch.stack([3.0 + u[:, _U_PLAYER2_X] * 5.0 - 10.0 / 3.0, (u[:, _U_PLAYER2_Y] * 2.0 - 1.0) * 2.0], -1)
        p2 = torch.where(normal.unsqueeze(-1), p2.new_tensor([-PLAYER_START[0], PLAYER_START[1]]), p2)
        # puck: NORMAL / TRAIN_SHOOTING at x = -+U(1, 2) (H/8 .. H/4 from the centre line), y = U(-1, 1), on the
        # agent's side in TRAIN_SHOOTING and on even episodes of NORMAL; TRAIN_DEFENSE at x = U(0, W/3),
        # y = 0.8 U(-H/2, H/2), shot at 60 m/s towards (-W/2, 0.6 U(-1.25, 1.25))
        agent_side = (~normal) | (episode % 2 == 0)
        start_x = (1.0 + u[:, _U_PUCK_X]) * torch.where(agent_side, -1.0, 1.0)
        start_y = u[:, _U_PUCK_Y] * 2.0 - 1.0
        shot_x = u[:, _U_PUCK_X] * (10.0 / 3.0)
        shot_y = ((u[:, _U_PUCK_Y] * 2.0 - 1.0) * (0.8 * 4.0)).clamp(-PUCK_Y_LIMIT, PUCK_Y_LIMIT)
        puck = torch.where(defense.unsqueeze(-1), torch.stack([shot_x, shot_y], -1),
                           torch.stack([start_x, start_y], -1))
        aim = torch.stack([torch.full_like(shot_x, -5.0), 0.6 * GOAL_HALF_WIDTH * (u[:, _U_SHOT_Y] * 2.0 - 1.0)], -1)
        direction = aim - puck
        direction = direction / direction.square().sum(-1, keepdim=True).sqrt()
        puck_vel = direction * (SHOT_SPEED * defense.unsqueeze(-1))
        fresh = torch.zeros(6, 2, k, dtype=torch.float32, device=dev)
        fresh[0, 0], fresh[1, 0] = PLAYER_START
        fresh[0, 1], fresh[1, 1] = p2[:, 0], p2[:, 1]
        self.players.index_copy_(2, idx, fresh)
        # the original applies the defense shot's force at the reset: the puck gets its velocity in the first step
        self.puck.index_copy_(1, idx, torch.cat([puck, torch.zeros_like(puck)], -1).t())
        self._kick.index_copy_(1, idx, puck_vel.t())
        self.spin.index_fill_(0, idx, 0.0)
        self.phase.index_copy_(0, idx, u[:, _U_PHASE] * math.pi)
        self._keys.index_copy_(0, idx, keys)
        self.hold.index_fill_(1, idx, 0.0)
        self.touching.index_fill_(1, idx, 0.0)
        self.t.index_fill_(0, idx, 0)
        return self._output(torch.zeros(b, 1, dtype=torch.float32, device=self.device))

    def _opponent_action(self) -> Tensor:
        """Player 2's action ``[4, B]`` (own frame, feature-major) from its last observation, by each row's opponent."""
        action = scripted_rows(self._opponent_rows, self._opponent_gain, self.phase, self.config.keep_mode)
        if self._has_policy_rows:
            idx = (self.opponent == POLICY).nonzero().squeeze(-1)
            out = torch.zeros(idx.shape[0], ACTION_SIZE, device=self.device)
            if self._opponent_policy is not None:
                with torch.no_grad():
                    out = self._opponent_policy(self._opponent_rows.index_select(1, idx).t())
                out = discrete_to_continuous(out) if not out.is_floating_point() else out
            action = action.index_copy(1, idx, out.to(action.dtype).reshape(-1, ACTION_SIZE).clamp(-1.0, 1.0).t())
        return action

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``EnvBase.maybe_reset`` (start new episodes in the finished rows of ``step_mdp``'s output), with the
        same result (``tests/envs/test_hockey.py``) at less cost: :meth:`_reset` returns every row's entries of
        the current state (those of the rows that play on equal the step's), so they replace the step's
        without TorchRL's ``where`` merge over every entry. (The last ``action`` stays as it was in every row;
        TorchRL zeroes it in the rows a partial reset starts. The policy writes the next one either way.)"""
        done = tensordict.get("done").reshape(-1)
        if not bool(done.any()):
            return tensordict
        out = tensordict.copy()
        out.update(self._reset(new_tensordict({"_reset": done.unsqueeze(-1)}, self.batch_size)))
        for key in ("done", "terminated", "truncated"):
            out.set(key, torch.zeros_like(tensordict.get(key)))
        return out

    def _agent_and_opponent_actions(self, tensordict: TensorDict) -> Tensor:
        """Both players' actions ``[4, 2, B]`` in their own frames, clipped to ``[-1, 1]``: the agent's from
        ``tensordict`` (mapped by :data:`DISCRETE_ACTIONS` with ``discrete_actions``), player 2's by its opponent."""
        b = self.batch_size[0]
        action = tensordict.get("action")
        if self.config.discrete_actions:
            agent = self._discrete.index_select(0, action.reshape(-1))
        else:
            agent = action.reshape(b, ACTION_SIZE).clamp(-1.0, 1.0)
        return torch.stack([agent.t(), self._opponent_action()], 1)

    def _step(self, tensordict: TensorDict) -> TensorDict:
        # Written for few, cheap kernels on contiguous feature-major planes ([2, B] for the players, [B] for the
        # puck): on CPU these cost a few microseconds each at B = 4096, while ``where``, size-2 reductions and
        # broadcasts over an inner dim cost 10-100x more. The stages are the pure functions of envs/hockey/puck.py.
        cfg = self.config
        act = self._agent_and_opponent_actions(tensordict)  # [4, 2, B], own frames
        x0, y0, angle0, vx0, vy0, omega0 = self.players
        damp = puck_damping(self.puck[2], self.puck[3])
        rackets = move_rackets(self.players, act, self._side)  # the original's forces, limits and damping
        face_x, face_y = torch.cos(rackets[2]) * self._side, torch.sin(rackets[2]) * self._side  # world frame
        holding = hold_puck(self.hold, act[3], rackets, vx0, vy0, face_x, face_y, self.spin)
        puck, start_x, start_y = fly_puck(tuple(self.puck), self._kick, damp, holding)
        self._kick.zero_()
        swept = cfg.contact == "swept"
        touch = touch_rackets(start_x, start_y, puck[0], puck[1], holding.rackets, x0, y0, angle0, self._side,
                              self.touching, swept)
        contact, arrive = contacts(touch, self.touching, holding, swept)
        catch = catches(contact, self._side, self.puck[2], holding.hold, cfg.keep_mode)
        rackets, puck, spin = collide(touch, contact, arrive, face_x, face_y, holding.rackets, puck, start_x, start_y,
                                      holding.spin)
        self.touching = arrive
        hold = holding.hold * (1.0 - catch) + catch * float(MAX_TIME_KEEP_PUCK)
        puck, spin, winner = walls_and_goals(puck, spin)
        # ---- commit
        self.players = torch.stack(rackets)
        self.puck = torch.stack(puck)
        self.spin = spin
        self.hold = hold
        self.t = self.t + 1
        phase = self.phase + rng.uniform_at(self._keys, _PHASE_STREAM, self.t) * PHASE_STEP_MAX
        self.phase = phase - (phase > 2 * math.pi).float() * (2 * math.pi)
        reward = self._reward(winner, catch[0], rackets[0][0], rackets[1][0], puck[0], puck[1], puck[2])
        terminated = (winner != 0).unsqueeze(-1)
        truncated = (self.t >= self._max_steps).unsqueeze(-1) & ~terminated
        return self._output(winner.unsqueeze(-1), reward=reward.unsqueeze(-1), done=terminated | truncated,
                            terminated=terminated, truncated=truncated)

    def _reward(self, winner: Tensor, caught: Tensor, x: Tensor, y: Tensor, kx: Tensor, ky: Tensor,
                kvx: Tensor) -> Tensor:
        """The step's reward ``[B]`` (class docstring): the win term and the shaping terms of the current weights,
        from the agent's racket ``x, y``, the puck ``kx, ky, kvx`` after the step and whether the agent ``caught``
        the puck."""
        reward = winner * self.r_win
        if self.w_closeness:
            own_half = ((kx < 0) & (kvx <= 0)).float()
            dx, dy = x - kx, y - ky
            scale = self._inv_max_steps * (CLOSENESS_PER_METRE_STEP * self.w_closeness)
            reward = reward + (dx * dx + dy * dy).sqrt() * scale * own_half
        if self.w_touch:
            reward = reward + caught * self.w_touch
        if self.w_direction:
            reward = reward + kvx * self._inv_max_steps * (self.w_direction / MAX_PUCK_SPEED)
        return reward

    # ------------------------------------------------------------------ observation
    def observation_of_state(self) -> tuple[Tensor, Tensor]:
        """``observation`` and ``observation_opponent`` ``[B, 18]`` of the current state (layout in the class
        docstring), and keep player 2's, feature-major, for its opponent's next action."""
        rows = torch.cat([self.players[:, 0], self.players[:, 1], self.puck, self.hold])  # [18, B]
        self._opponent_rows = rows.index_select(0, self._mirror_index) * self._mirror_sign
        return rows.t().contiguous(), self._opponent_rows.t().contiguous()

    def _output(self, winner: Tensor, reward: Tensor | None = None, **flags: Tensor) -> TensorDict:
        """The TensorDict of the current state: observations, info, the running episodes' returns, and ``reward``
        and the done ``flags`` of a step."""
        observation, opponent = self.observation_of_state()
        win, loss = (winner > 0).float(), (winner < 0).float()
        info = {"winner": winner, "won": win, "lost": loss, "drawn": 1.0 - win - loss,
                  "steps": self.t.unsqueeze(-1).float()}
        out = {"observation": observation, "observation_opponent": opponent, "info": info,
               "episode_reward": self.episode_returns(reward), **flags}
        if reward is not None:
            out["reward"] = reward
        # _new_unsafe skips the checks of TensorDict(...): every entry is built here with batch size [B]
        return new_tensordict(out, self.batch_size, self.device)
