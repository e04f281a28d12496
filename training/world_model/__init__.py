"""The world model of the camera stream: trained on collected rollouts (``train.py``), fine-tuned with
data-regularised diffusion RL (``ddrl.py``), on frame sequences cut from the driving data (``data.py``)."""
