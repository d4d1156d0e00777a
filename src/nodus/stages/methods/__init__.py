"""The programs a framework shortcut's generated stages run (``python -m``): ``train`` (TRL's
trainer under the hf-trainer-v1 machinery, method profile) and ``export`` (the final model into
the workload's outputs). Both read their settings from ``protocol.ENV_METHOD``.

    train.py      the train stage: TRL's SFT, DPO or GRPO trainer on a local base model
    export.py     the export stage: the trained model into the workload's outputs
    settings.py   what both read: the resolved ``[method]`` settings, and the dataset
"""
