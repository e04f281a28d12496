"""VLA building blocks: the unicycle action space and the flow-matching action expert."""

import math

import pytest
import torch

from agents.vla.action_space import (
    CURV_MAX,
    SPEED_FLOOR,
    _path,
    _speeds,
    from_trajectory,
    initial_speed,
    integrate,
    to_plan,
)
from agents.vla.flow import (
    ActionExpert,
    ExpertConfig,
    _sde_step_params,
    flow_draw,
    log_prob,
    sample_ode,
    sample_sde,
)


def _actions(B=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, 64)
    a = 1.5 * torch.sin(2 * math.pi * t * torch.rand(B, 1, generator=g))
    k = 0.05 * torch.cos(2 * math.pi * t * torch.rand(B, 1, generator=g))
    return torch.stack([a, k], -1)


def test_unicycle_round_trip():
    acts, v0 = _actions(), torch.tensor([6.0, 9.0, 12.0, 15.0])
    traj = integrate(acts, v0)
    assert traj.shape == (4, 64, 3)
    assert torch.allclose(from_trajectory(traj, v0), acts, atol=2e-2)  # accel m/s^2, curvature 1/m
    straight = integrate(torch.zeros(1, 64, 2), torch.tensor([10.0]))
    assert (
        torch.allclose(straight[0, :, 0], torch.arange(1, 65) * 1.0, atol=1e-5) and straight[..., 1:].abs().max() < 1e-6
    )


def _mid_speeds(acts: torch.Tensor, v0: torch.Tensor) -> torch.Tensor:
    v = torch.cat([v0[:, None], v0[:, None] + torch.cumsum(acts[..., 0] * 0.1, 1)], 1)
    return 0.5 * (v[:, :-1] + v[:, 1:])


def test_lateral_acceleration_is_curvature_times_the_squared_speed():
    """The same trajectory in both lateral actions: ``a_lat = k v^2`` at each step's mean speed (floored
    at SPEED_FLOOR), and each integrates back to it."""
    acts, v0 = _actions(), torch.tensor([0.0, 1.0, 12.0, 25.0])
    acts[0, :, 0] = 0.5  # pulls away from a standstill: below the floor, then above it
    acts[2:, :, 1] *= 0.1  # within 1 g of lateral acceleration at speed
    traj = integrate(acts, v0)
    lateral = from_trajectory(traj, v0, lateral="lateral_acceleration")
    expected = acts[..., 1] * _mid_speeds(acts, v0).clamp_min(SPEED_FLOOR) ** 2
    assert torch.allclose(lateral[..., 1], expected, atol=0.05)  # m/s^2
    assert torch.allclose(lateral[..., 0], from_trajectory(traj, v0)[..., 0])  # the acceleration is the same
    assert torch.allclose(integrate(lateral, v0, lateral="lateral_acceleration"), traj, atol=0.05)
    # one lateral acceleration is a gentle curve at speed and a tight one slowly, capped by the curvature bound
    fast, slow = (
        integrate(torch.tensor([0.0, 1.0]).expand(1, 64, 2), torch.tensor([v]), lateral="lateral_acceleration")
        for v in (20.0, 0.5)
    )
    assert fast[0, -1, 2] == pytest.approx(1.0 / 20.0 * 6.4, rel=1e-4)  # yaw = a_lat / v * t
    assert slow[0, -1, 2] == pytest.approx(CURV_MAX * 0.5 * 6.4, rel=1e-4)  # 1 / 2^2 = 0.25 1/m, over the bound


def test_actions_for_a_turn_sharper_than_the_bound_follow_the_targets_positions():
    """A car pulling out of a standstill turns its direction of motion faster than the unicycle's
    curvature bound allows: the curvatures read off the yaw channel are clipped and their path misses
    by metres; the fitted ones stay within the bound and follow the target's positions far closer."""
    acts = torch.zeros(1, 64, 2)
    acts[0, :, 0] = 2.0
    acts[0, :25, 1] = 0.35  # beyond CURV_MAX for 2.5 s, then straight on
    v0 = torch.tensor([0.5])
    target = _path(acts[..., 1], _speeds(acts[..., 0], v0, 0.1), 0.1)  # the unicycle without the bound
    clipped = acts.clone()
    clipped[..., 1] = clipped[..., 1].clamp(-CURV_MAX, CURV_MAX)
    fitted = from_trajectory(target, v0)
    miss = lambda a: float((integrate(a, v0)[..., :2] - target[..., :2]).norm(dim=-1).max())  # noqa: E731
    assert miss(clipped) > 3.0  # metres off, as the yaw channel alone gave
    assert fitted[..., 1].abs().max() <= CURV_MAX + 1e-6
    assert miss(fitted) < 0.3 * miss(clipped)
    assert torch.allclose(fitted[..., 0], acts[..., 0], atol=0.1)  # the accelerations are the target's


def test_a_plan_brakes_to_a_stop_and_never_leaves_the_action_space():
    from envs.interface import TRAJ_HIGH, TRAJ_LOW

    brake = integrate(torch.tensor([-9.8, 0.1]).expand(1, 64, 2), torch.tensor([5.0]))
    assert brake[0, :, 0].diff().min() >= 0 and brake[0, -1, 0] == pytest.approx(5.0**2 / (2 * 9.8), rel=0.05)
    floor = integrate(torch.tensor([9.8, 0.0]).expand(1, 64, 2), torch.tensor([35.0]))
    assert floor[0, -1, 0] <= 40.0 * 6.4
    for lateral in ("curvature", "lateral_acceleration"):  # an untrained head's noise
        wild = to_plan(torch.randn(256, 64, 2) * 3.0, torch.rand(256) * 35.0, lateral=lateral).numpy()
        assert (wild[..., :2] >= TRAJ_LOW[:, :2]).all() and (wild[..., :2] <= TRAJ_HIGH[:, :2]).all()


def test_initial_speed_from_history():
    hist = torch.zeros(2, 16, 4)
    hist[0, :, 3] = 8.0
    hist[1, :, 3] = torch.linspace(2.0, 5.0, 16)
    v = initial_speed(hist)
    assert v[0] == pytest.approx(8.0, abs=1e-4) and 4.5 < v[1] < 5.3


def _expert(seed=0):
    torch.manual_seed(seed)
    return ActionExpert(ExpertConfig())


def _context(B=2, T=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(B, 2, T, 16, generator=g), torch.randn(B, 2, T, 16, generator=g)) for _ in range(2)]


def test_shapes_determinism_and_context_masking():
    ex, ctx = _expert(), _context()
    a = sample_ode(ex, 2, ctx, generator=torch.Generator().manual_seed(3))
    b = sample_ode(ex, 2, ctx, generator=torch.Generator().manual_seed(3))
    assert a.shape == (2, 64, 2) and torch.equal(a, b)
    padded = [
        (torch.cat([k, torch.randn(2, 2, 3, 16)], 2), torch.cat([v, torch.randn(2, 2, 3, 16)], 2)) for k, v in ctx
    ]
    mask = torch.cat([torch.ones(2, 7), torch.zeros(2, 3)], 1)
    x, t = torch.randn(2, 64, 2), torch.rand(2)
    with torch.no_grad():
        assert torch.allclose(ex(x, t, ctx), ex(x, t, padded, mask), atol=1e-5)


@pytest.mark.parametrize("stochastic", ["one", "all"])
def test_sde_log_probs_are_gaussian_densities_and_the_unchanged_ratio_is_one(stochastic):
    ex, ctx = _expert(), _context()
    x, chain, mask, logp = sample_sde(
        ex, 2, ctx, noise_level=0.7, stochastic=stochastic, generator=torch.Generator().manual_seed(5)
    )
    assert chain.shape == (11, 2, 64, 2) and torch.equal(chain[-1], x)
    assert int(mask.sum()) == (1 if stochastic == "one" else 10)
    # independent check with torch.distributions
    ref = torch.zeros(2)
    with torch.no_grad():
        for i in torch.nonzero(mask).flatten().tolist():
            v = ex(chain[i], torch.full((2,), i / 10), ctx)
            mean, std = _sde_step_params(chain[i], v, i, 10, 0.7)
            ref += torch.distributions.Normal(mean, std).log_prob(chain[i + 1]).flatten(1).sum(1)
    assert torch.allclose(logp, ref, rtol=1e-5, atol=1e-3)
    new = log_prob(ex, chain, mask, ctx, noise_level=0.7)
    assert torch.equal(torch.exp(new - logp), torch.ones(2))  # exactly 1 for an unchanged policy
    new.sum().backward()  # and differentiable for the policy gradient
    assert ex.head.weight.grad is not None


def test_sde_with_a_noise_level_per_dimension_explores_only_the_noisy_one():
    ex, ctx = _expert(), _context()
    gen = torch.Generator().manual_seed(5)
    _, chain, mask, logp = sample_sde(ex, 2, ctx, noise_level=(0.0, 0.7), stochastic="all", generator=gen)
    plan = sample_ode(ex, 2, ctx, noise_scale=0.0)
    start = torch.zeros(2, 64, 2)
    x0, chain0, _, _ = sample_sde(
        ex,
        2,
        ctx,
        noise_level=(0.0, 0.7),
        stochastic="all",
        noise_scale=0.0,
        generator=torch.Generator().manual_seed(5),
    )
    assert torch.equal(chain0[0], start) and not torch.allclose(x0[..., 1], plan[..., 1])  # curvature explored
    # acceleration: every step is the plain ODE step from the chain's state (no noise on that dimension)
    ref = torch.zeros(2)
    with torch.no_grad():
        for i in range(10):
            v = ex(chain[i], torch.full((2,), i / 10), ctx)
            assert torch.allclose(chain[i + 1][..., 0], (chain[i] + v / 10)[..., 0], atol=1e-5)
            mean, std = _sde_step_params(chain[i], v, i, 10, 0.7)
            ref += torch.distributions.Normal(mean[..., 1], std).log_prob(chain[i + 1][..., 1]).sum(1)
    assert torch.allclose(logp, ref, rtol=1e-5, atol=1e-3)  # the density of the curvature alone
    new = log_prob(ex, chain, mask, ctx, noise_level=(0.0, 0.7))
    assert torch.equal(torch.exp(new - logp), torch.ones(2))


def test_log_prob_with_a_noise_level_per_sample_matches_each_samples_own_density():
    ex, ctx = _expert(), _context()
    levels = [(0.0, 0.7), (1.0, 0.7)]  # sample 0 explored the curvature only, sample 1 both dimensions
    parts = [
        sample_sde(ex, 2, ctx, noise_level=lv, stochastic="all", generator=torch.Generator().manual_seed(3))
        for lv in levels
    ]
    chain = torch.stack([parts[0][1][:, 0], parts[1][1][:, 1]], dim=1)  # sample i's chain drawn with level i
    logp_old = torch.stack([parts[0][3][0], parts[1][3][1]])
    per_sample = torch.tensor(levels)
    new = log_prob(ex, chain, torch.ones(10, dtype=torch.bool), ctx, noise_level=per_sample)
    assert torch.equal(torch.exp(new - logp_old), torch.ones(2))  # each under the density it was drawn from
    assert not torch.allclose(
        log_prob(ex, chain, torch.ones(10, dtype=torch.bool), ctx, noise_level=(1.0, 0.7)), logp_old
    )
    # steps stochastic for one sample only (a batch of decisions that drew their own steps)
    mask = torch.tensor([[True, False] * 5, [True] * 10])
    mixed = log_prob(ex, chain, mask, ctx, noise_level=per_sample)
    for i in range(2):
        row = [(k[i : i + 1], v[i : i + 1]) for k, v in ctx]
        alone = log_prob(ex, chain[:, i : i + 1], mask[i : i + 1], row, noise_level=levels[i])
        assert torch.allclose(mixed[i : i + 1], alone, atol=1e-4)


def test_overfitting_eight_samples_drives_the_flow_loss_down():
    torch.manual_seed(0)
    ex = ActionExpert(ExpertConfig(hidden_size=64, intermediate_size=128, num_layers=1))
    target = torch.tanh(_actions(8, seed=2) * torch.tensor([0.5, 10.0]))
    ctx = _context(B=8)
    opt = torch.optim.AdamW(ex.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(0)
    first = flow_draw(ex, target, ctx, generator=g).loss.item()
    for _ in range(250):
        loss = flow_draw(ex, target, ctx, generator=g).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        last = sum(flow_draw(ex, target, ctx, generator=g).loss.item() for _ in range(10)) / 10
    assert last < 0.15 * first
    sample = sample_ode(ex, 8, ctx, generator=torch.Generator().manual_seed(1), steps=10)
    assert (sample - target).abs().mean() < 0.25


def test_a_zero_noise_start_is_deterministic():
    from agents.vla.flow import sample_ode

    e = _expert()
    a = sample_ode(e, 2, noise_scale=0.0, generator=torch.Generator().manual_seed(0))
    b = sample_ode(e, 2, noise_scale=0.0, generator=torch.Generator().manual_seed(1))
    c = sample_ode(e, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_travel_is_the_distance_a_plan_drives_along_its_path_and_stops_with_it():
    """``travel`` integrates the acceleration channel as ``integrate`` drives it: on a straight plan it is
    the plan's x, on a turning one its path length, and a plan braking to a stop travels no further."""
    from agents.vla.action_space import normalise, travel

    v0 = torch.tensor([10.0, 10.0])
    a = torch.zeros(2, 64, 2)
    a[1, :, 0] = -4.0  # stops after 2.5 s, 12.5 m on
    a[:, :, 1] = torch.tensor([[0.0], [0.05]])  # the second turns
    traj = integrate(a, v0)
    driven = travel(normalise(a), v0)  # from the flow head's bound-scaled actions
    torch.testing.assert_close(driven[0], traj[0, :, 0])
    steps = torch.cat([traj[1:, :1, :2], torch.diff(traj[1:, :, :2], dim=1)], 1).norm(dim=-1)
    torch.testing.assert_close(driven[1], torch.cumsum(steps[0], 0), atol=1e-3, rtol=1e-4)
    assert float(driven[1, -1]) == pytest.approx(12.5, abs=1e-4)


def test_the_clearance_bound_follows_the_recorded_car_ahead_and_synthetic_cars_are_nearer_and_slower():
    """``lead_bound``: the car's position (its gap, driving on at the ego's speed less the closing speed)
    less the margin, never below 0, unbounded with no car within 60 m. ``synthetic_leads`` replaces a
    seeded share of the rows with a car nearer than the recorded one, stopped (and blocking the lane) or
    slower than the ego, and leaves the others as they are."""
    from agents.vla.clearance import lead_bound, synthetic_leads
    from agents.vla.perception import PERCEPTION_TARGETS

    gap, closing, stopped, blocked = (
        PERCEPTION_TARGETS.index(k) for k in ("lead_gap", "lead_closing_speed", "lead_stopped", "blocked_gap")
    )
    perception = torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]] * 3)
    perception[1, [gap, closing]] = torch.tensor([20.0 / 60, 0.5])  # 20 m ahead at 5 m/s (ego at 10)
    perception[2, [gap, closing, stopped]] = torch.tensor([1.0 / 60, 1.0, 1.0])  # stopped, 1 m ahead
    bound = lead_bound(perception, torch.tensor([10.0, 10.0, 10.0]), 2.0, 64)
    assert torch.isinf(bound[0]).all()
    torch.testing.assert_close(bound[1, [0, 9, 63]], torch.tensor([18.5, 23.0, 50.0]))  # 20 + 5 t - 2
    assert (bound[2] == 0).all()

    v0 = torch.linspace(0.0, 15.0, 64)
    many = torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]]).repeat(64, 1)
    many[:32, gap] = 0.5  # a car 30 m ahead in half the rows
    same, none = synthetic_leads(many, v0, 0.0, torch.Generator().manual_seed(0))
    assert not none.any() and torch.equal(same, many)
    given, chosen = synthetic_leads(many, v0, 0.5, torch.Generator().manual_seed(0))
    again, _ = synthetic_leads(many, v0, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(given, again) and 16 < int(chosen.sum()) < 48
    torch.testing.assert_close(given[~chosen], many[~chosen])
    rows = given[chosen]
    assert (rows[:, gap] <= many[chosen, gap]).all()  # nearer than the recorded car
    assert (rows[:, closing] >= 0).all()  # never faster than the ego
    still = rows[:, stopped] == 1
    assert still.any() and (~still).any()
    torch.testing.assert_close(rows[still, blocked] * 40, (rows[still, gap] * 60).clamp_max(40.0))
    torch.testing.assert_close(rows[still, closing], (v0[chosen][still] / 10).clamp(-1, 1))


def test_a_lead_tracker_reads_the_closing_speed_as_the_gaps_fall_and_starts_again_for_another_car():
    """The gap's fall since the last decision over the period; none on a new track, none with nothing
    ahead (which ends the track), and a new track when the gap jumps past the gate (a car cutting in)."""
    from agents.vla.perception import LEAD_RANGE_M, LeadTracker

    track = LeadTracker(period_s=0.5)
    readings = [30.0, 28.0, 25.0, 24.5, LEAD_RANGE_M, 20.0, 19.0, 8.0, 7.0, 7.5]
    closing = [track(gap) for gap in readings]
    assert closing == [None, 4.0, 6.0, 1.0, None, None, 2.0, None, 2.0, -1.0]
    wide = LeadTracker(period_s=0.5, gate_m=20.0)  # the same jump within a wider gate: one car braking hard
    assert [wide(gap) for gap in (30.0, 28.0, 15.0)] == [None, 4.0, 26.0]
