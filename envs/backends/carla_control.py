"""Our controller's (accel, steer angle) as a CARLA ``VehicleControl`` (throttle, brake, steer).

The trajectory controller asks for a longitudinal acceleration (m/s^2) and a road-wheel angle (rad,
left positive), as the embedded world's bicycle model takes them. A CARLA vehicle takes pedals in
[0, 1] and a normalised steer in [-1, 1], right positive, scaled by its front wheels' lock angle.
Pedals are a feed-forward map (the acceleration full throttle or full brake gives, plus the rolling
and air drag to overcome at this speed) corrected by a PI loop on the measured acceleration, so the
map need not be exact for every blueprint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PedalGains:
    full_throttle_accel: float = 3.5  # m/s^2 at full throttle, low speed (a mid-size sedan)
    full_brake_decel: float = 8.0  # m/s^2 at full brake
    rolling: float = 0.15  # m/s^2 of rolling resistance
    drag: float = 4e-4  # (m/s^2) / (m/s)^2 of air drag
    kp: float = 0.05  # pedal per m/s^2 of acceleration error
    ki: float = 0.1  # pedal per (m/s^2 . s) of integrated error
    integral_limit: float = 0.3  # the most pedal the integral may add or remove


class PedalController:
    """Pedals and steer for one vehicle; keeps the PI loop's integral between calls (reset per episode)."""

    def __init__(self, max_steer_rad: float = math.radians(70.0), gains: PedalGains | None = None) -> None:
        if max_steer_rad <= 0:
            raise ValueError(f"max_steer_rad must be positive, got {max_steer_rad}")
        self.max_steer_rad = max_steer_rad
        self.g = gains or PedalGains()
        self.integral = 0.0

    def reset(self) -> None:
        self.integral = 0.0

    def __call__(
        self, accel: float, steer: float, speed: float, measured_accel: float, dt: float
    ) -> tuple[float, float, float]:
        """(throttle, brake, steer) for a wanted ``accel`` and road-wheel angle ``steer`` (ours)."""
        g = self.g
        error = accel - measured_accel
        self.integral = min(max(self.integral + g.ki * error * dt, -g.integral_limit), g.integral_limit)
        resistance = g.rolling + g.drag * speed * speed
        net = accel + resistance  # what the pedals must add to the resistance the car meets anyway
        pedal = (net / g.full_throttle_accel if net >= 0 else net / g.full_brake_decel) + g.kp * error + self.integral
        if accel <= -2.0 and speed < 0.2:
            pedal = min(pedal, -0.3)  # hold the car at a stop
        throttle, brake = (min(pedal, 1.0), 0.0) if pedal >= 0 else (0.0, min(-pedal, 1.0))
        carla_steer = min(max(-steer / self.max_steer_rad, -1.0), 1.0)  # CARLA steers right for positive values
        return throttle, brake, carla_steer
