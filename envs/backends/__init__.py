"""Simulator backends beside the embedded world. ``carla_*``: the parts of the CARLA backend that
need no server (frames, routes on a map's topology, scenario translation, connection policy) and
the session that does (``carla_session``, imported only when the ``carla`` client is installed).
``world_model``: a learned model of the camera stream, and the cameras of ``backend="worldmodel"``."""
