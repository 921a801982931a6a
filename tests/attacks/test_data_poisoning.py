"""label_flip maps l -> C - 1 - l; backdoor stamps a white bottom-right square on a fraction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robustfl import attacks
from robustfl.errors import ConfigError, ParameterError
from robustfl.types import TaskInfo

from ..factories import attack_ctx as ctx
from ..factories import np_

MNIST = TaskInfo(name="mnist", num_classes=10, input_shape=(1, 28, 28), is_image=True)
RIDGE = TaskInfo(name="ridge", num_classes=None, input_shape=(20,), is_image=False)
LOGREG = TaskInfo(name="logreg", num_classes=5, input_shape=(10,), is_image=False)


def test_label_flip() -> None:
    attack = attacks.create("label_flip")
    assert attack.poisons_data is True
    attack.setup(MNIST)
    x = torch.rand(12, 1, 28, 28, dtype=torch.float64)
    y = torch.arange(12) % 10
    x2, y2 = attack.poison(x, y, torch.Generator().manual_seed(0))
    assert y2.tolist() == [9 - (i % 10) for i in range(12)]
    assert torch.equal(x2, x) and x2 is not x
    assert y.tolist() == [i % 10 for i in range(12)]  # inputs untouched
    c = ctx()
    assert torch.equal(attack(c), c.own)  # the rows are sent as trained


def test_label_flip_refuses_regression() -> None:
    with pytest.raises(ConfigError, match=r"label_flip.*'ridge'"):
        attacks.create("label_flip").setup(RIDGE)


@pytest.mark.parametrize("n", [10, 7, 1])
@pytest.mark.parametrize(("fraction", "size", "target"), [(0.5, 3, 0), (0.3, 2, 7), (1.0, 4, 3)])
def test_backdoor_poison(n: int, fraction: float, size: int, target: int) -> None:
    attack = attacks.create("backdoor", poison_fraction=fraction, trigger_size=size, target_label=target)
    attack.setup(MNIST)
    g = torch.Generator().manual_seed(0)
    x = 0.9 * torch.rand(n, 1, 28, 28, generator=g, dtype=torch.float64)  # below white everywhere
    y = torch.randint(0, 10, (n,), generator=g)
    x2, y2 = attack.poison(x, y, torch.Generator().manual_seed(5))
    xa, xb, ya, yb = np_(x), np_(x2), y.numpy(), y2.numpy()
    count = math.floor(fraction * n + 0.5)  # floor(x n + 0.5): the project's fraction-to-count rule
    stamped = [i for i in range(n) if np.all(xb[i, :, -size:, -size:] == 1.0)]
    assert len(stamped) == count
    chosen = sorted(torch.randperm(n, generator=torch.Generator().manual_seed(5))[:count].tolist())
    assert stamped == chosen
    for i in range(n):
        rest = xb[i].copy()
        if i in stamped:
            assert yb[i] == target
            rest[:, -size:, -size:] = xa[i, :, -size:, -size:]
        else:
            assert yb[i] == ya[i]
        np.testing.assert_array_equal(rest, xa[i])  # nothing else changed
    assert np.array_equal(np_(x), xa)  # inputs untouched


def test_backdoor_trigger_and_flat_inputs() -> None:
    attack = attacks.create("backdoor")
    attack.setup(TaskInfo(name="digits", num_classes=10, input_shape=(1, 8, 8), is_image=True))
    x = torch.zeros(5, 64, dtype=torch.float64)  # flattened 8 x 8 images
    t = np_(attack.trigger(x)).reshape(5, 8, 8)
    want = np.zeros((8, 8))
    want[-3:, -3:] = 1.0
    np.testing.assert_array_equal(t, np.tile(want, (5, 1, 1)))
    assert attack.target_label == 0 and float(x.abs().sum()) == 0.0


def test_backdoor_refuses_non_image_tasks() -> None:
    with pytest.raises(ConfigError, match=r"backdoor.*'logreg'"):
        attacks.create("backdoor").setup(LOGREG)
    with pytest.raises(ConfigError, match="target_label"):
        attacks.create("backdoor", target_label=10).setup(MNIST)


def test_backdoor_centre_trigger_is_the_middle_square() -> None:
    """position = "centre": the s x s square from ((H - s) // 2, (W - s) // 2), by hand for 28 x 28, s = 3."""
    from robustfl.attacks.backdoor import Backdoor
    from robustfl.types import TaskInfo

    info = TaskInfo(name="mnist", num_classes=10, input_shape=(1, 28, 28), is_image=True)
    expected = torch.zeros(28, 28)
    expected[12:15, 12:15] = 1.0
    centre = Backdoor(position="centre")
    centre.setup(info)
    assert torch.equal(centre.trigger(torch.zeros(4, 1, 28, 28))[:, 0], expected.expand(4, 28, 28))
    corner = Backdoor()
    corner.setup(info)
    expected_corner = torch.zeros(28, 28)
    expected_corner[25:, 25:] = 1.0
    assert torch.equal(corner.trigger(torch.zeros(1, 1, 28, 28))[0, 0], expected_corner)
    with pytest.raises(ParameterError, match="position"):
        Backdoor(position="middle")
