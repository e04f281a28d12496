"""The learned world model (an action-conditioned flow-matching model of the camera stream) and the
env backend that lets agents drive inside it (``backend="worldmodel"``)."""

from envs.backends.world_model.imagined import ImaginedCameras, decision_motion, motion_from_track
from envs.backends.world_model.model import WorldModel, WorldModelConfig

__all__ = ["ImaginedCameras", "WorldModel", "WorldModelConfig", "decision_motion", "motion_from_track"]
