"""Sensors: camera rigs, the CPU camera renderer, the privileged BEV raster and video recording."""

from envs.sensors.bev import BEVRenderer
from envs.sensors.camera import CameraRenderer
from envs.sensors.rig import RIGS, Camera, make_rig
from envs.sensors.video import VideoRecorder

__all__ = ["RIGS", "BEVRenderer", "Camera", "CameraRenderer", "VideoRecorder", "make_rig"]
