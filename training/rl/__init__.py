"""Closed-loop RL of the VLA's trajectory head on Ray RLlib env runners.

``grpo.py`` and ``ppo.py`` are the algorithms; ``losses.py`` the policy-gradient losses as pure
tensor functions; ``rollouts.py`` the env runners' episodes and branches; ``module.py`` the VLA as an
RLlib module (Flow-SDE sampling and log-probs, a value head); ``env.py`` the env as RLlib builds it;
``setup.py`` what both algorithms do before their first update. ``ppo_sb3.py`` is a classic
stable-baselines3 reference on the state vector.
"""
