"""leanemb.torch with the 1-byte trainable row formats, q8 and fp8 (docs/numerics.md): rows stay in
their format through training. Run by the torch_api CTest beside tests/torch_api_test.py, whose
helpers it uses.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("leanemb.torch")
from torch_api_test import B, DIM, batch, ebc_one  # noqa: E402


def fp8_values():
    """Every finite fp8 value (docs/numerics.md "fp8 rows": E4M3, exponent bias 12), from the definition."""
    vals = set()
    for c in range(0x7f):
        e, m = c >> 3, c & 7
        v = m * 2.0 ** -14 if e == 0 else (8 + m) * 2.0 ** (e - 12 - 3)
        vals.update((v, -v))
    return vals


def train_30_steps(ebc, seed):
    """30 steps of a linear head on one batch towards a random target; the losses before each step.
    The seed fixes the batch, the target and the Linear's initial weights (the loss ratio the
    tests check depends on them)."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    lin = torch.nn.Linear(DIM, 1)
    kjt = batch(rng, ["f"])
    target = torch.randn(B, 1, generator=torch.Generator().manual_seed(seed))
    losses = []
    for _ in range(30):
        loss = (lin(ebc(kjt).values()) - target).pow(2).mean()
        losses.append(loss.item())
        loss.backward()
        lin.weight.data -= 0.05 * lin.weight.grad
        lin.weight.grad = None
    return losses


def test_fp8_rows_train_on_their_grid():
    ebc = ebc_one("adagrad", "sum", 0.1, dtype="fp8", state_dtype="int8")
    grid = fp8_values()
    w0 = ebc.weight("t")
    assert set(w0.flatten().tolist()) <= grid  # initialized onto the grid (round to nearest)
    losses = train_30_steps(ebc, 13)
    w = ebc.weight("t")
    assert ebc.step_count == 30 and not torch.equal(w, w0)
    assert set(w.flatten().tolist()) <= grid  # every update is written as an fp8 value
    assert losses[-1] < 0.5 * losses[0]
    # One byte per weight; 8-bit Adagrad state: DIM codes and one fp32 block scale.
    assert ebc._layouts[0]["stride_bytes"] == DIM + DIM + 4


def test_q8_rows_train_as_int8_codes_and_a_row_scale():
    ebc = ebc_one("adagrad", "sum", 0.1, dtype="q8", state_dtype="int8")
    losses = train_30_steps(ebc, 14)
    assert ebc.step_count == 30
    assert losses[-1] < 0.5 * losses[0]
    # Every row is its largest magnitude / 127 times integers in [-127, 127] (docs/numerics.md "q8 rows").
    w = ebc.weight("t").double()
    scale = w.abs().amax(dim=1, keepdim=True) / 127
    codes = torch.where(scale > 0, w / scale.clamp_min(1e-30), torch.zeros_like(w))
    assert torch.allclose(codes, codes.round(), atol=1e-3)
    assert codes.abs().max() <= 127 + 1e-3
    # DIM codes and an fp32 scale; 8-bit Adagrad state: DIM codes and one fp32 block scale.
    assert ebc._layouts[0]["stride_bytes"] == DIM + 4 + DIM + 4


def test_q8_rows_with_int4_adagrad_state_train_and_round_trip():
    """q8 rows + 4-bit Adagrad state (docs/numerics.md "int4"): the state holds half-octave
    multiples of each row's largest sum (no zero once a row trained), and a state_dict restored into
    a fresh collection continues bit for bit."""
    a = ebc_one("adagrad", "sum", 0.1, dtype="q8", state_dtype="int4")
    losses = train_30_steps(a, 15)
    assert a.step_count == 30 and losses[-1] < 0.5 * losses[0]
    # DIM codes + an fp32 scale; DIM / 2 bytes of 4-bit codes + one fp32 block scale.
    assert a._layouts[0]["stride_bytes"] == DIM + 4 + DIM // 2 + 4
    st = a.optimizer_state("t").double()
    top = st.amax(dim=1, keepdim=True)
    trained = top.squeeze(1) > 0
    assert trained.any()
    ratio = (st[trained] / top[trained]).log2() * 2  # (code - 15): integers in [-15, 0]
    assert torch.allclose(ratio, ratio.round(), atol=1e-4) and ratio.min() >= -15 - 1e-4
    b = ebc_one("adagrad", "sum", 0.1, dtype="q8", state_dtype="int4")
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.optimizer_state("t"), b.optimizer_state("t"))
    rng = np.random.default_rng(16)
    kjt = batch(rng, ["f"])
    for m in (a, b):
        (m(kjt).values() ** 2).sum().backward()
    assert torch.equal(a.weight("t"), b.weight("t")) and torch.equal(a.optimizer_state("t"), b.optimizer_state("t"))
