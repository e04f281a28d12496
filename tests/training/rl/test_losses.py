"""The policy-gradient losses against hand-computed values (pure tensor functions, no Ray)."""

from __future__ import annotations

import math

import pytest
import torch

from training.rl.losses import (
    ClipConfig,
    clipped_loss,
    group_advantages,
    informative_groups,
    k3_kl,
    policy_loss,
    value_loss,
)

# --- losses ------------------------------------------------------------------------------------------------------


def test_group_advantages_by_hand():
    r = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 7.0])
    g = torch.tensor([0, 0, 0, 1, 1, 2])
    adv = group_advantages(r, g)
    # group 0: mean 2, unbiased std 1; group 1: equal rewards; group 2: a single rollout
    assert torch.allclose(adv, torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]), atol=1e-5)
    assert torch.allclose(group_advantages(r, g, normalise=False), torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]))
    assert informative_groups(r, g).tolist() == [True, True, True, False, False, False]
    # batch: the same centred rewards over their std across the batch, unbiased: sqrt(2 / 5)
    by_batch = group_advantages(r, g, normalise="batch")
    assert torch.allclose(by_batch, torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]) / (0.4**0.5), atol=1e-5)
    assert torch.equal(group_advantages(r, g, normalise="none"), group_advantages(r, g, normalise=False))
    with pytest.raises(ValueError, match="normalisation"):
        group_advantages(r, g, normalise="per_token")


def test_clip_and_dual_clip_by_hand():
    ratio = torch.tensor([0.5, 1.0, 1.5, 1.5, 20.0])
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0])
    loss, clipped = clipped_loss(ratio, adv, ClipConfig(eps_low=0.2, eps_high=0.28, dual_clip=10.0))
    # 0.5 < 0.8: unclipped; 1.5 > 1.28 with A > 0: clipped at 1.28; A < 0 at ratio 1.5: -(-1.5) = 1.5;
    # A < 0 at ratio 20: 20 capped by dual-clip at -c A = 10
    assert torch.allclose(loss, torch.tensor([-0.5, -1.0, -1.28, 1.5, 10.0]))
    assert clipped.tolist() == [False, False, True, False, True]
    no_dual, _ = clipped_loss(ratio, adv, ClipConfig(eps_low=0.2, eps_high=0.28, dual_clip=None))
    assert float(no_dual[-1]) == pytest.approx(20.0)
    total, stats = policy_loss(torch.log(ratio), torch.zeros(5), adv, ClipConfig(0.2, 0.28, 10.0))
    assert float(total) == pytest.approx((-0.5 - 1.0 - 1.28 + 1.5 + 10.0) / 5, rel=1e-5)
    assert stats["clip_fraction"] == pytest.approx(0.4)


def test_unchanged_policy_has_ratio_exactly_one_and_the_plain_gradient():
    logp = torch.tensor([-3.0, 1.5, 0.25, 7.0], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    for variant in ("grpo", "dapo", "aipo"):
        loss, stats = policy_loss(logp, logp.detach().clone(), adv, ClipConfig(), variant)
        assert stats["ratio_mean"] == 1.0 and stats["clip_fraction"] == 0.0
        (grad,) = torch.autograd.grad(loss, logp)
        assert torch.allclose(grad, -adv / 4)  # d/dlogp of -mean(ratio A) at ratio 1


def test_gspo_uses_one_ratio_per_sequence():
    logp = torch.tensor([0.2, 0.4, -0.1])
    old = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -1.0])
    seq = torch.tensor([7, 7, 9])
    loss, _ = policy_loss(logp, old, adv, ClipConfig(eps_low=0.2, eps_high=0.28, dual_clip=None), "gspo", seq)
    r7, r9 = math.exp(0.3), math.exp(-0.1)  # geometric means of the sequences' ratios
    expected = (-min(r7, 1.28) + max(r9, 0.8)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="sequence"):
        policy_loss(logp, old, adv, ClipConfig(), "gspo")


def test_aipo_truncates_the_ratio():
    loss, _ = policy_loss(
        torch.log(torch.tensor([3.0, 0.5])), torch.zeros(2), torch.tensor([1.0, 1.0]), ClipConfig(rho_max=2.0), "aipo"
    )
    assert float(loss) == pytest.approx(-(2.0 + 0.5) / 2)


def test_k3_kl_by_hand_and_in_the_loss():
    cur, ref = torch.tensor([0.0]), torch.tensor([math.log(2.0)])
    assert float(k3_kl(cur, ref)) == pytest.approx(2.0 - math.log(2.0) - 1.0)
    assert float(k3_kl(ref, ref)) == 0.0
    loss, stats = policy_loss(cur, cur, torch.tensor([0.0]), ClipConfig(), logp_ref=ref, kl_coef=0.5)
    assert float(loss) == pytest.approx(0.5 * (1.0 - math.log(2.0)))
    assert stats["kl_ref"] == pytest.approx(1.0 - math.log(2.0))


def test_value_loss_clip_by_hand():
    v, old, target = torch.tensor([3.0]), torch.tensor([0.0]), torch.tensor([0.0])
    assert float(value_loss(v, old, target)) == pytest.approx(4.5)
    # clipped V = 0 + clamp(3, -1, 1) = 1: max((3-0)^2, (1-0)^2) keeps the pessimistic 9
    assert float(value_loss(v, old, target, clip=1.0)) == pytest.approx(4.5)
    assert float(value_loss(torch.tensor([0.5]), torch.tensor([0.0]), torch.tensor([3.0]), clip=0.2)) == pytest.approx(
        0.5 * (3.0 - 0.2) ** 2
    )
