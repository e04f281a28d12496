"""Training: recipes in, checkpoints and metrics out.

- ``run.py``: the entry point (``python training/run.py --config RECIPE.toml``), dispatching a recipe
  to its algorithm; ``recipes.py``: a recipe type per algorithm.
- The shared plumbing: ``checkpoints.py`` (atomic, resumable), ``metrics_log.py`` (JSONL, TensorBoard,
  curves), ``milestones.py`` (periodic checkpoints and closed-loop evaluations, model selection, the
  final policy), ``loop.py`` (the data order and learning-rate schedule of supervised trainers),
  ``averaging.py`` (the average of the weights a supervised run can save instead of its last step).
- ``data/``: collecting labelled driving data and reading it back.
- ``sft.py``: supervised fine-tuning of the VLA.
- ``rl/``: closed-loop RL of the VLA: ``grpo.py``, ``ppo.py`` (RLlib), ``ppo_sb3.py`` (a classic
  baseline), with their losses, rollouts, RLlib module and env.
- ``world_model/``: the world model of the camera stream (``train.py``) and its DDRL fine-tuning.

Algorithms import the plumbing, never each other.
"""
