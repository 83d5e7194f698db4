"""leanemb.sparse: the jagged inputs and outputs of leanemb.torch's modules, in TorchRec's shapes.

KeyedJaggedTensor (keys, values, lengths or offsets, optional per-id weights), JaggedTensor (one
feature's values and offsets) and KeyedTensor (pooled outputs keyed by feature). leanemb.torch
re-exports them (``lt.KeyedJaggedTensor``); docs/python.md has the contract.
"""
import numpy as np
import torch

__all__ = ["KeyedJaggedTensor", "JaggedTensor", "KeyedTensor"]


# ---- jagged inputs and outputs -------------------------------------------------------------------

def _as_index_tensor(x, name):
    """A 1-D int64 CPU tensor; int32 is converted (a copy), floats and bools raise TypeError."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"{name} must hold integers (torch.int64), got {x.dtype}")
    if x.device.type != "cpu":
        raise TypeError(f"{name} must be a CPU tensor, got device {x.device}")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
    return x.to(torch.int64).contiguous()


def _offsets_of(lengths):
    """Offsets [n + 1] (int64) of the bags with ``lengths`` [n]: 0, then the running sums."""
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return offsets


class _Jagged:
    """The accessors JaggedTensor and KeyedJaggedTensor share (TorchRec's names)."""

    def values(self):
        return self._values

    def lengths(self):
        return self._lengths

    def offsets(self):
        return self._offsets

    def weights_or_none(self):
        return self._weights


class JaggedTensor(_Jagged):
    """One feature's jagged values: ``values`` [nnz, ...] with ``lengths`` [B] / ``offsets`` [B + 1]."""

    def __init__(self, values, lengths=None, offsets=None, weights=None):
        self._values = values
        if offsets is None and lengths is None:
            raise ValueError("JaggedTensor needs lengths or offsets")
        if offsets is None:
            lengths = _as_index_tensor(lengths, "lengths")
            offsets = _offsets_of(lengths)
        else:
            offsets = _as_index_tensor(offsets, "offsets")
        self._offsets = offsets
        self._lengths = lengths if lengths is not None else offsets[1:] - offsets[:-1]
        self._weights = weights

    def to_padded_dense(self, desired_length=None, padding_value=0.0):
        """[B, L, ...] with bag b's values in its first lengths[b] positions (differentiable).

        L is ``desired_length`` (longer bags are cut) or the longest bag."""
        lengths = self._lengths
        B = lengths.numel()
        L = int(lengths.max()) if desired_length is None and B > 0 and self._values.shape[0] > 0 else int(desired_length or 0)
        v = self._values
        out = v.new_full((B, L) + tuple(v.shape[1:]), padding_value)
        if B == 0 or L == 0 or v.shape[0] == 0:
            return out
        bag = torch.repeat_interleave(torch.arange(B), lengths)
        pos = torch.arange(v.shape[0]) - self._offsets[:-1][bag]
        keep = pos < L
        return out.index_put((bag[keep], pos[keep]), v[keep])


class KeyedJaggedTensor(_Jagged):
    """Several features' ids in TorchRec's KeyedJaggedTensor layout (no TorchRec dependency).

    ``values`` [nnz] holds the ids of feature keys[0]'s B bags, then keys[1]'s, ...;
    ``lengths`` [len(keys) * B] (or ``offsets`` [len(keys) * B + 1]; both: they must agree, else
    ValueError) the bags' lengths;
    ``weights`` [nnz] optional per-id weights (floats; may require grad). B is ``stride``, or
    len(lengths) // len(keys).
    """

    def __init__(self, keys, values, lengths=None, offsets=None, weights=None, stride=None):
        self._keys = list(keys)
        if len(set(self._keys)) != len(self._keys):
            raise ValueError(f"KeyedJaggedTensor: duplicate keys in {self._keys}")
        self._values = _as_index_tensor(values, "values")
        if lengths is None and offsets is None:
            raise ValueError("KeyedJaggedTensor needs lengths or offsets")
        given_lengths = None
        if lengths is not None and offsets is not None:
            # Both given: they must describe the same bags (using either silently would hide
            # a caller's bug: TorchRec trusts whichever it reads first).
            given_lengths = _as_index_tensor(lengths, "lengths")
            lengths = None
        if offsets is None:
            lengths = _as_index_tensor(lengths, "lengths")
            if lengths.numel() and int(lengths.min()) < 0:
                raise ValueError("KeyedJaggedTensor: lengths must be >= 0")
            offsets = _offsets_of(lengths)
        else:
            offsets = _as_index_tensor(offsets, "offsets")
            if offsets.numel() < 1:
                raise ValueError("KeyedJaggedTensor: offsets must have len(keys) * B + 1 >= 1 entries")
            lengths = offsets[1:] - offsets[:-1]
            if lengths.numel() and int(lengths.min()) < 0:
                raise ValueError("KeyedJaggedTensor: offsets must be non-decreasing")
            if int(offsets[0]) != 0:
                raise ValueError(f"KeyedJaggedTensor: offsets[0] must be 0, got {int(offsets[0])}")
            if given_lengths is not None and not torch.equal(given_lengths, lengths):
                bad = (given_lengths != lengths).nonzero() if given_lengths.numel() == lengths.numel() else None
                where = (f" (first at bag {int(bad[0])}: length {int(given_lengths[int(bad[0])])}, offsets give "
                         f"{int(lengths[int(bad[0])])})") if bad is not None and bad.numel() else \
                    f" ({given_lengths.numel()} lengths, {lengths.numel()} bags in offsets)"
                raise ValueError(f"KeyedJaggedTensor: lengths and offsets disagree{where}; pass one of them")
        self._lengths = lengths
        self._offsets = offsets
        nk = len(self._keys)
        if nk == 0:
            raise ValueError("KeyedJaggedTensor needs at least one key")
        if stride is None:
            if lengths.numel() % nk:
                raise ValueError(f"KeyedJaggedTensor: {lengths.numel()} lengths do not split over {nk} keys")
            stride = lengths.numel() // nk
        if lengths.numel() != nk * stride:
            raise ValueError(f"KeyedJaggedTensor: expected len(keys) * stride = {nk * stride} lengths, got {lengths.numel()}")
        self._stride = int(stride)
        if int(offsets[-1]) != self._values.numel():
            raise ValueError(f"KeyedJaggedTensor: lengths sum to {int(offsets[-1])} but values has {self._values.numel()} ids")
        if weights is not None:
            if not isinstance(weights, torch.Tensor):
                weights = torch.as_tensor(np.asarray(weights))
            if not weights.is_floating_point():
                raise TypeError(f"KeyedJaggedTensor: weights must hold floats, got {weights.dtype}")
            if weights.shape != self._values.shape:
                raise ValueError(f"KeyedJaggedTensor: weights must have shape {tuple(self._values.shape)}, got {tuple(weights.shape)}")
        self._weights = weights

    @classmethod
    def from_lengths_sync(cls, keys, values, lengths, weights=None, stride=None):
        return cls(keys, values, lengths=lengths, weights=weights, stride=stride)

    @classmethod
    def from_offsets_sync(cls, keys, values, offsets, weights=None, stride=None):
        return cls(keys, values, offsets=offsets, weights=weights, stride=stride)

    def keys(self):
        return list(self._keys)

    def stride(self):
        return self._stride

    def _span(self, key):
        k = self._keys.index(key)
        B = self._stride
        return int(self._offsets[k * B]), int(self._offsets[(k + 1) * B]), k

    def feature(self, key):
        """(ids [n] int64 view, offsets [B + 1] int64, weights [n] or None) of one key."""
        if key not in self._keys:
            raise KeyError(f"KeyedJaggedTensor has no key '{key}' (keys: {self._keys})")
        lo, hi, k = self._span(key)
        B = self._stride
        off = self._offsets[k * B:(k + 1) * B + 1]
        if lo:
            off = off - lo
        w = self._weights[lo:hi] if self._weights is not None else None
        return self._values[lo:hi], off, w

    def __getitem__(self, key):
        ids, off, w = self.feature(key)
        return JaggedTensor(ids, offsets=off, weights=w)

    def to_dict(self):
        return {k: self[k] for k in self._keys}


class KeyedTensor:
    """Pooled outputs of several features: ``values()`` [B, sum of dims], keys in order."""

    def __init__(self, keys, length_per_key, values):
        self._keys = list(keys)
        self._lengths = list(length_per_key)
        self._values = values
        self._offsets = [0]
        for n in self._lengths:
            self._offsets.append(self._offsets[-1] + n)

    def keys(self):
        return list(self._keys)

    def values(self):
        return self._values

    def length_per_key(self):
        return list(self._lengths)

    def offset_per_key(self):
        return list(self._offsets)

    def __getitem__(self, key):
        i = self._keys.index(key)
        return self._values[:, self._offsets[i]:self._offsets[i + 1]]

    def to_dict(self):
        return {k: self[k] for k in self._keys}
