"""Stage execution contracts: the directory contract and the hf-trainer-v1 integration.

The runner and the program both use these; nothing here imports the runner.

    directory.py    the directory contract: settled, whole ``checkpoint-<step>`` folders
    layouts.py      checkpoint layouts nodus knows, and when a folder of each is complete
    formats.py      whether a checkpoint file's bytes are whole
    completeness.py whether a checkpoint is proven whole: torn, whole, or unproven
    step_names.py   the training step a directory-contract program's own names carry
    recorded_steps.py  the step and epoch a torch.save checkpoint records inside it
    metric_logs.py  the metrics a directory-contract program logs: TensorBoard event files,
                    Lightning's metrics.csv, JSON lines, read on from where each read stopped
    terminal.py     a program's output as a terminal would show it: a progress bar's last
                    frame, no escape sequences (the runner's stream, ``runs logs``, ``nodus ui``)
    hf/             the hf-trainer-v1 integration (its in-process half in ``hf/inprocess/``)
    methods/        the programs a framework shortcut's generated stages run
"""
