"""Scale-out on Ray: placement groups, trainer/rollout/evaluation actors, the Ray driver.

Modules: placement (plan + placement groups), actors (evaluation and rollout workers),
trainer_group (FSDP2 trainer ranks as actors), rollout_pool (driver-side facades), backend
(EvalBackend over evaluation actors with requeue), servers (inference servers as actors), driver
(`run_training_ray`). Ray is imported lazily: importing this package does not need it.
"""
