"""Counter-based random numbers, one independent stream per env row and episode.

Every random draw of an episode is a pure function of ``(row_seed, episode_index, stream, i)``, so
row ``b`` of a batch of 1024 envs seeded ``s`` produces exactly the instances of a single env seeded
``s + b``, whatever the batch size, and no Python loop over rows is needed. The mixer is a 32-bit
integer hash (multiply-xorshift, constants from C. Wellons' "hash-prospector", bias 0.02) computed in
int64 with multipliers below 2**31, so no product overflows.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def hash32(x: Tensor) -> Tensor:
    """Hash an int64 tensor to 32-bit values (held in int64, in ``[0, 2**32)``)."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def episode_keys(row_seed: Tensor, episode: Tensor) -> Tensor:
    """Key ``[R]`` of episode ``episode[r]`` of the row seeded ``row_seed[r]`` (both int64 ``[R]``)."""
    hi = hash32((row_seed >> 32) + _GOLDEN)
    k = hash32(row_seed ^ hi)
    return hash32(k ^ hash32(episode + 0x51ED27))


def uniform(key: Tensor, stream: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Tensor:
    """Uniform draws in the open interval (0, 1), shape ``[R, *shape]``, 24 bits of resolution.

    Args:
        key: int64 ``[R]`` episode keys from :func:`episode_keys`.
        stream: a small integer naming the quantity drawn (distinct per quantity).
        shape: trailing shape of the draw.
    """
    n = math.prod(shape)
    counter = torch.arange(n, device=key.device, dtype=torch.int64) + (stream << 20)
    h = hash32(key.unsqueeze(-1) ^ hash32(counter + _GOLDEN).unsqueeze(0))
    u = ((h >> 8).to(dtype) + 0.5) * (1.0 / (1 << 24))
    return u.reshape(key.shape[0], *shape)


def uniform_at(key: Tensor, stream: int, counter: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """One uniform draw in (0, 1) per row at a per-row position (e.g. the step index) of a stream: ``[R]``.

    Args:
        key: int64 ``[R]`` episode keys from :func:`episode_keys`.
        stream: a small integer naming the quantity drawn.
        counter: int64 ``[R]``, the position of each row's draw in the stream (below ``2**20``).
    """
    h = hash32(key ^ hash32(counter + ((stream << 20) + _GOLDEN)))
    return ((h >> 8).to(dtype) + 0.5) * (1.0 / (1 << 24))


def normal(key: Tensor, stream: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard normal draws ``[R, *shape]`` by Box-Muller (two uniform streams)."""
    u1 = uniform(key, stream, shape, dtype)
    u2 = uniform(key, stream + 1, shape, dtype)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
