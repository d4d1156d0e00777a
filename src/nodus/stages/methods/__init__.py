"""The programs a framework shortcut's generated stages run (``python -m``): ``train`` (TRL's
trainer under the hf-trainer-v1 machinery, method profile) and ``export`` (the final model into
the workload's outputs). Both read their settings from ``protocol.ENV_METHOD``."""
