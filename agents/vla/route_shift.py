"""A held lane change drawn into the route: with ``route_shift`` the route a VLA agent's plan reads moves
a lane to the side its manoeuvre head chose to change to, for as long as the hold keeps that change, and
back after it; on the moved route the plan is given ``keep_lane``.

Given its manoeuvre alone, the tiny VLA's plan is 1.8-2.6 m to the side at 6.4 s (of a 3.5 m lane), and
once the car is half a metre out it steers back to the route it reads (the data teaches it to: the
expert's way back from ``offset_ego``'s branches), so a held change creeps out and the car runs into the
car it meant to pass (stop 89: 19 of 20 ``overtake`` episodes on ``core_large`` test). What the plan does
follow is its route. So the head decides the lane and the route is drawn there, the way a lane-level
route hands a driving policy its lane changes (a CARLA route's waypoints move across the lane it changes
into). The route moves across as the expert moves across: a smoothstep over 2.5 s of driving at the
speed now (no less than 4.5 m), along the route's own normals, so it bends with a curve; the lateral and
heading error the ego state reads move with it. The plan is then given ``keep_lane``: the change class
starts the flow from the mean lane change, which on a route already moved carries the car a lane too far
(measured: 2.8-4.2 m past the new lane's centre, into the oncoming lane). A hold's end brings the route
back the same way. A change is a lane from where the route is drawn: the head's change to the other
side, chosen in the moved lane (its classes are the ego frame's), brings the route back to where it runs,
not a lane past it (stop 89 drew it there, and three val overtakes drove off the road beyond their lane).

A change the route makes itself is not drawn again: where the route the car reads already bends half the
shift or more to the chosen side of the line it starts along (a ramp merging into the lane to its left, a
lane change on a lane-level route, a curve), the head has named the route's own move (its classes are the
ego frame's: the expert's future moves across with the route) and moving the route a lane further takes
the car two lanes across (stop 89: ``highway_merge`` -7.9 on val in one draw). That hold plans its change
class on the route as it is, as a hold without the shift does.

Only the observation and the class planned change: the cameras, the head and the weights are the
model's. The shift follows the hold one decision late (the decision a change is chosen plans it from
its class alone), since the head chooses after the VLM has read the route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agents.expert import MIN_RAMP_M, RAMP_S  # the route moves across as the expert does
from agents.vla.manoeuvre import MANOEUVRES, ManoeuvreHold
from envs.observations import HEADING_ERROR, LATERAL_ERROR
from scenarios.maps import smoothstep

KEEP = MANOEUVRES.index("keep_lane")
SIDES = {MANOEUVRES.index("change_left"): 1, MANOEUVRES.index("change_right"): -1}  # + is the ego's left


def planned_on_route(manoeuvres: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The classes a plan is given for the held ``manoeuvres`` ``[B]`` on routes drawn a lane to ``drawn``
    ``[B]`` (+1 left, -1 right, 0: where they run): keep the lane where the route is moved for that change
    already (the route carries it; the class again would move the car twice)."""
    side = torch.zeros_like(manoeuvres)
    for manoeuvre, sign in SIDES.items():
        side = torch.where(manoeuvres == manoeuvre, sign, side)
    return torch.where((side != 0) & (side == drawn.to(side)), KEEP, manoeuvres)


def route_normals(route: np.ndarray) -> np.ndarray:
    """Unit left normals ``[P, 2]`` of an ego-frame polyline ``[P, 2]`` (x forward, y left)."""
    tangent = np.gradient(route, axis=0) if len(route) > 1 else np.array([[1.0, 0.0]])
    tangent = tangent / np.maximum(np.linalg.norm(tangent, axis=1, keepdims=True), 1e-6)
    return np.stack([-tangent[:, 1], tangent[:, 0]], 1)


def route_bends_to(route: np.ndarray, side: int, metres: float) -> bool:
    """Whether an ego-frame route ``[P, 2]`` moves ``metres`` or more to ``side`` (+1 left, -1 right) of the
    straight line along its first segment: a move across (or a curve) the route makes itself."""
    route = np.asarray(route, np.float64)
    if len(route) < 2 or not side:
        return False
    across = (route - route[0]) @ route_normals(route)[0]  # the first normal is the first segment's
    return bool((side * across).max() >= metres)


def move_route(observation: dict[str, Any], offsets: np.ndarray | float, turn: float = 0.0) -> dict[str, Any]:
    """``observation`` (not changed) with its route's points moved ``offsets`` metres (one, or one per point;
    left positive) along the route's normals, and the ego state's errors to it with them: the lateral error by
    the first point's offset, the heading error by ``turn`` (rad, left positive), how far the moved route
    heads across at the car."""
    route = np.asarray(observation["route"], np.float64)
    offsets = np.broadcast_to(np.asarray(offsets, np.float64), len(route))
    ego = np.array(observation["ego_state"], np.float32)
    ego[LATERAL_ERROR] -= offsets[0]
    ego[HEADING_ERROR] -= turn
    moved = route + offsets[:, None] * route_normals(route)
    return observation | {"route": moved.astype(np.float32), "ego_state": ego}


@dataclass
class RouteShift:
    """One episode's route, moved ``metres`` to the side of the lane change ``hold`` holds; each call
    returns the observation with the route moved and advances the move across by ``decision_s`` of
    driving at the observed speed."""

    metres: float
    decision_s: float
    start: float = 0.0  # the route's offset at the car when the current move began (left positive)
    goal: float = 0.0  # where the current move takes it
    driven: float = 0.0  # metres driven since the current move began
    ramp: float = MIN_RAMP_M  # metres the current move takes
    side: int = 0  # the side of the change held (+1 left, -1 right, 0: none)
    route_moves: bool = False  # the route makes that move itself (read as the hold began)

    def __call__(self, observation: dict[str, Any], hold: ManoeuvreHold) -> dict[str, Any]:
        side = SIDES.get(hold.held, 0) if hold.left > 0 else 0
        goal = self.goal
        if side != self.side:  # a new hold, or its end
            self.side, self.route_moves = side, route_bends_to(observation["route"], side, self.metres / 2)
            # a change is a lane from where the route is drawn (the way back from a moved route is the route);
            # the hold's end brings it back
            across = self.goal + side * self.metres if side and not self.route_moves else 0.0
            goal = float(np.clip(across, -self.metres, self.metres))
        speed = max(float(observation["ego_state"][0]), 0.0)
        if goal != self.goal:  # a new move: from wherever the route is now
            self.start, self.goal = float(self.offset_at(0.0)), goal
            self.driven, self.ramp = 0.0, max(MIN_RAMP_M, RAMP_S * speed)
        moved = self.moved(observation)
        self.driven += speed * self.decision_s
        return moved

    @property
    def drawn(self) -> int:
        """The side the route is drawn a lane to for the change held (+1 left, -1 right), 0 where it is not."""
        return 0 if self.route_moves else self.side

    def planned(self, manoeuvre: int) -> int:
        """The class the plan is given for the hold's ``manoeuvre`` (:func:`planned_on_route`)."""
        return int(planned_on_route(torch.tensor([manoeuvre]), torch.tensor([self.drawn]))[0])

    def offset_at(self, ahead: np.ndarray | float) -> np.ndarray:
        """The route's offset (m, left positive) ``ahead`` metres along it from where the car is."""
        blend = smoothstep((self.driven + np.asarray(ahead, np.float64)) / self.ramp)
        return self.start + (self.goal - self.start) * blend

    def moved(self, observation: dict[str, Any]) -> dict[str, Any]:
        """``observation`` with its route and the ego state's errors to it moved by the offsets now."""
        if self.start == self.goal == 0.0:
            return observation
        route = np.asarray(observation["route"], np.float64)  # its first point: where the car is along it
        ahead = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(route, axis=0), axis=1))])
        here, step = self.offset_at(np.array([0.0, 0.5]))
        return move_route(observation, self.offset_at(ahead), np.arctan((step - here) / 0.5))
