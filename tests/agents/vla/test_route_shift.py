"""``RouteShift``: a held lane change moves the route the plan reads a lane to its side (the plan then keeps
that lane), blended in over the expert's move across, along the route's normals, with the ego state's
errors; the hold's end brings it back the same way; without a held change the observation passes
through untouched."""

import numpy as np
import pytest

from agents.vla.manoeuvre import MANOEUVRES, ManoeuvreHold
from agents.vla.route_shift import MIN_RAMP_M, RAMP_S, RouteShift, route_bends_to, route_normals

LEFT, RIGHT, KEEP = (MANOEUVRES.index(m) for m in ("change_left", "change_right", "keep_lane"))


def observation(speed: float = 10.0, route: np.ndarray | None = None) -> dict:
    if route is None:
        route = np.stack([np.arange(32) * 2.0, np.zeros(32)], 1)
    ego = np.array([speed, 0.0, 0.0, 0.0, 13.9, 0.2, 0.05], np.float32)  # lateral error 0.2 m, heading 0.05 rad
    return {"route": route.astype(np.float32), "ego_state": ego}


def test_no_held_change_passes_the_observation_through():
    shift, hold = RouteShift(3.5, 0.5), ManoeuvreHold(4)
    obs = observation()
    hold(KEEP)
    assert shift(obs, hold) is obs


def test_a_held_change_moves_the_route_across_then_back():
    speed, decision_s = 10.0, 0.5
    shift, hold = RouteShift(3.5, decision_s), ManoeuvreHold(8)
    ramp = max(MIN_RAMP_M, RAMP_S * speed)  # 25 m: five decisions of driving
    hold(LEFT)
    assert shift.planned(LEFT) == LEFT  # the decision that chooses the change plans it from its class
    first = shift(observation(speed), hold)
    assert shift.planned(LEFT) == KEEP and shift.planned(RIGHT) == RIGHT  # the route carries the change
    y = first["route"][:, 1]
    ahead = np.arange(32) * 2.0
    t = np.clip(ahead / ramp, 0, 1)
    np.testing.assert_allclose(y, 3.5 * t * t * (3 - 2 * t), atol=1e-5)  # a smoothstep over the ramp
    assert y[0] == 0.0 and np.all(np.diff(y) >= 0) and y[-1] == pytest.approx(3.5)
    assert first["ego_state"][5] == pytest.approx(0.2)  # the car is still on its own lane's line
    for _ in range(5):
        hold(KEEP)  # the head keeps its lane; the hold plans the change on
        moved = shift(observation(speed), hold)
    np.testing.assert_allclose(moved["route"][:, 1], 3.5, atol=1e-5)  # 25 m driven: all across
    np.testing.assert_allclose(moved["route"][:, 0], ahead)
    assert moved["ego_state"][5] == pytest.approx(0.2 - 3.5)
    assert moved["ego_state"][6] == pytest.approx(0.05)  # across and straight again
    hold(KEEP)  # the hold's last decision
    shift(observation(speed), hold)
    hold(KEEP)  # the hold is spent: the route comes back from where it is
    back = shift(observation(speed), hold)
    assert shift.planned(LEFT) == LEFT  # a new change to the left would be planned again
    assert back["route"][0, 1] == pytest.approx(3.5) and back["route"][-1, 1] == pytest.approx(0.0, abs=1e-5)
    later = shift(observation(speed), hold)  # 5 m driven back: the car's point on its way back
    assert 0.0 < later["route"][0, 1] < 3.5
    assert later["ego_state"][6] > 0.05  # the route heads back to the right: the car heads left of it


def test_a_right_change_moves_right_and_a_curve_moves_along_its_normals():
    hold = ManoeuvreHold(20)
    hold(RIGHT)
    angle = np.linspace(0, 1.0, 32)  # an arc of radius 60 m turning left
    route = 60.0 * np.stack([np.sin(angle), 1 - np.cos(angle)], 1)
    shift = RouteShift(3.5, 0.5)
    for _ in range(12):
        moved = shift(observation(10.0, route), hold)
    offsets = moved["route"] - route
    np.testing.assert_allclose(np.linalg.norm(offsets, axis=1), 3.5, rtol=1e-3)
    np.testing.assert_allclose(np.einsum("pi,pi->p", offsets, route_normals(route)), -3.5, rtol=1e-3)


def test_the_change_back_from_a_moved_route_is_the_route():
    speed, decision_s = 10.0, 0.5
    shift, hold = RouteShift(3.5, decision_s), ManoeuvreHold(12)
    hold(LEFT)
    for _ in range(6):  # 30 m driven: the route is a lane to the left
        moved = shift(observation(speed), hold)
        hold(KEEP)
    np.testing.assert_allclose(moved["route"][:, 1], 3.5, atol=1e-5)
    hold(RIGHT)  # past the car: the head names the way back, a change to the right of where it drives
    assert shift.planned(RIGHT) == RIGHT  # the decision that chooses it plans it from its class
    for _ in range(6):
        back = shift(observation(speed), hold)
        assert shift.planned(RIGHT) == KEEP  # the route carries it: not a lane right of the route
        hold(KEEP)
    np.testing.assert_allclose(back["route"][:, 1], 0.0, atol=1e-5)  # back on the route, not a lane past it
    assert back["ego_state"][5] == pytest.approx(0.2)


def merging_route(across: float = 3.5) -> np.ndarray:
    """A route that moves ``across`` metres to the left between 20 and 50 m ahead and drives on parallel."""
    x = np.arange(32) * 2.0
    t = np.clip((x - 20.0) / 30.0, 0, 1)
    return np.stack([x, across * t * t * (3 - 2 * t)], 1)


def test_which_side_a_route_bends_to():
    straight = np.stack([np.arange(32) * 2.0, np.zeros(32)], 1)
    angle = np.linspace(0, 1.0, 32)
    left_arc = 60.0 * np.stack([np.sin(angle), 1 - np.cos(angle)], 1)
    assert not route_bends_to(straight, 1, 1.75) and not route_bends_to(straight, -1, 1.75)
    assert route_bends_to(merging_route(), 1, 1.75) and not route_bends_to(merging_route(), -1, 1.75)
    assert not route_bends_to(merging_route(1.5), 1, 1.75)  # less than half a lane across
    assert route_bends_to(left_arc, 1, 1.75) and not route_bends_to(left_arc, -1, 1.75)
    assert route_bends_to(left_arc @ np.diag([1.0, -1.0]), -1, 1.75)  # the mirror image bends right
    turned = straight @ np.array([[np.cos(0.3), np.sin(0.3)], [-np.sin(0.3), np.cos(0.3)]])
    assert not route_bends_to(turned, 1, 1.75)  # a straight route the car is not aligned with


def test_a_change_the_route_makes_itself_is_not_drawn_again():
    shift, hold = RouteShift(3.5, 0.5), ManoeuvreHold(8)
    hold(LEFT)  # the head names the merge ahead a change to the left
    obs = observation(10.0, merging_route())
    for _ in range(6):
        assert shift(obs, hold) is obs  # the route already carries the car across
        assert shift.planned(LEFT) == LEFT  # planned from its class, as a hold without the shift
        hold(KEEP)
    shift, hold = RouteShift(3.5, 0.5), ManoeuvreHold(8)
    hold(RIGHT)  # a change to the other side is drawn as on any route
    moved = shift(observation(10.0, merging_route()), hold)
    assert moved["route"][-1, 1] == pytest.approx(3.5 - 3.5, abs=1e-4) and shift.planned(RIGHT) == KEEP


def test_the_agent_plans_on_the_moved_route_while_it_holds_a_change(tmp_path, monkeypatch):
    from agents.vla.agent import VLAAgent
    from agents.vla.model import VLA, VLAConfig

    VLA(VLAConfig(size="tiny", manoeuvres=3, manoeuvre_in_state=True)).save_pretrained(tmp_path / "vla")
    agent = VLAAgent(str(tmp_path / "vla"), reasoning=False, hold=6, route_shift=3.5)
    with pytest.raises(ValueError, match="decision_s"):
        agent.reset({"seed": 0})
    agent.reset({"seed": 0, "decision_s": 0.5})
    seen = []
    monkeypatch.setattr(
        agent.model, "act_batch", lambda obs, *a: seen.append(obs[0]) or [{"trajectory": None, "reasoning": None}]
    )
    agent.act(observation())
    agent._held.held, agent._held.left = LEFT, 5  # as after a decision whose head chose the left change
    for _ in range(6):
        agent.act(observation())
    assert seen[0]["route"][-1, 1] == 0.0  # nothing held yet: the route as observed
    assert seen[1]["route"][-1, 1] == pytest.approx(3.5) and seen[-1]["route"][0, 1] == pytest.approx(3.5)
