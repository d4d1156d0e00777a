"""Patch ``transformers.Trainer`` when it is imported, so an unmodified program is prepared.

``install()`` runs from the bootstrap ``sitecustomize``. It adds a meta-path finder that lets
``transformers.trainer`` load normally and then wraps these things on it:

- ``Trainer.__init__``: after the Trainer is built, check the profile and qualification; refuse
  (explicit ``hf-trainer-v1``), run unprepared (``auto``), or attach a :class:`Session`;
- ``Trainer.train``: resume from the restored checkpoint (after the identity check), even
  when the script passes a ``resume_from_checkpoint`` of its own, and make the final save;
- ``Trainer.get_batch_samples``: a restored checkpoint at or past the end of training
  (``global_step >= max_steps``) gets no further batch, so ``train()`` runs no update and ends
  as the Trainer ends a training (:meth:`Session.finished_on_restore`);
- ``Trainer._maybe_log_save_evaluate``: the optimizer boundary, right after the step's logging;
- ``skip_first_batches``: the resumed partial epoch replays the current epoch's order (below);
- ``Trainer.get_train_dataloader``: the train loader's collator records the random state of
  every collation (:mod:`~nodus.stages.hf.inprocess.collation`), and persistent dataloader
  workers of a resumed attempt start without a draw from the main generator
  (:meth:`Session.train_dataloader`);
- ``Trainer._load_rng_state``: skipped once where the session loaded the checkpoint's random
  state already (after the pending batches of a masking collator were rebuilt);
- ``Trainer.__init_subclass__``: TRL's ``SFTTrainer`` and ``DPOTrainer`` (the trl extension)
  seed the process with ``args.seed`` before they build a LoRA adapter (:func:`_seed_trl_trainer`).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
from typing import Any

from nodus import protocol

TARGET = "transformers.trainer"


def install() -> None:
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _TrainerFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TrainerFinder())


class _TrainerFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps the real loader of transformers.trainer."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)  # ask the rest of the path, once
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        patch(module)


def patch(module: Any) -> None:
    trainer_cls = module.Trainer
    if getattr(trainer_cls, "_nodus_patched", False):
        return

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        super(trainer_cls, cls).__init_subclass__(**kwargs)
        _seed_trl_trainer(cls)

    trainer_cls.__init_subclass__ = classmethod(__init_subclass__)
    for subclass in _subclasses(trainer_cls):  # defined before this patch: TRL imported first
        _seed_trl_trainer(subclass)
    trainer_cls.__init__ = _preparing_init(trainer_cls.__init__)
    trainer_cls.train = _resuming_train(trainer_cls.train)
    trainer_cls._maybe_log_save_evaluate = _at_boundary(trainer_cls._maybe_log_save_evaluate)
    trainer_cls.get_batch_samples = _counting_batches(trainer_cls.get_batch_samples)
    trainer_cls.get_train_dataloader = _recording_loader(trainer_cls.get_train_dataloader)
    trainer_cls._load_rng_state = _loading_rng_once(trainer_cls._load_rng_state)
    module.skip_first_batches = _epoch_preserving(module.skip_first_batches)
    trainer_cls._nodus_patched = True


def _preparing_init(original_init):
    """``Trainer.__init__``, then :func:`~nodus.stages.hf.inprocess.prepare.prepare`."""
    signature = inspect.signature(original_init)

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if protocol.ControlPaths.from_environment() is None:
            return  # a Trainer built in a process nodus did not start
        given = signature.bind(self, *args, **kwargs).arguments
        given.pop("self", None)
        from nodus.stages.hf.inprocess.prepare import prepare

        prepare(self, given)

    return __init__


def _resuming_train(original_train):
    """``Trainer.train`` from the restored checkpoint, ending with the final save."""

    @functools.wraps(original_train)
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        session = getattr(self, "_nodus_session", None)
        if session is None:
            return original_train(self, resume_from_checkpoint, *args, **kwargs)
        restored = session.start()
        resume_from_checkpoint = session.resume_from(resume_from_checkpoint, restored)
        try:
            result = original_train(self, resume_from_checkpoint, *args, **kwargs)
            session.finish()
        finally:
            session.writer.wait()  # never exit with a checkpoint half written
        return result

    return train


def _at_boundary(original_boundary):
    """The optimizer boundary, right after the step's logging."""

    @functools.wraps(original_boundary)
    def _maybe_log_save_evaluate(self, *args, **kwargs):
        result = original_boundary(self, *args, **kwargs)
        session = getattr(self, "_nodus_session", None)
        if session is not None:
            session.at_boundary()
        return result

    return _maybe_log_save_evaluate


def _counting_batches(original_batches):
    """Count the batches trained; none once a restored checkpoint ends the training."""

    @functools.wraps(original_batches)
    def get_batch_samples(self, *args, **kwargs):
        session = getattr(self, "_nodus_session", None)
        if session is not None and session.finished_on_restore():
            return [], None  # the restored state ends the training: no further update
        batches, items = original_batches(self, *args, **kwargs)
        if session is not None:
            session.batches_trained(len(batches))
        return batches, items

    return get_batch_samples


def _recording_loader(original_loader):
    """The train loader built by :meth:`Session.train_dataloader`."""

    @functools.wraps(original_loader)
    def get_train_dataloader(self, *args, **kwargs):
        session = getattr(self, "_nodus_session", None)
        if session is None:
            return original_loader(self, *args, **kwargs)
        return session.train_dataloader(lambda: original_loader(self, *args, **kwargs))

    return get_train_dataloader


def _loading_rng_once(original_load_rng):
    """``Trainer._load_rng_state``, skipped where the session loaded the random state."""

    @functools.wraps(original_load_rng)
    def _load_rng_state(self, *args, **kwargs):
        session = getattr(self, "_nodus_session", None)
        if session is not None and session.rng_loaded():
            return None  # loaded already, before the collations that followed the resume
        return original_load_rng(self, *args, **kwargs)

    return _load_rng_state


def _subclasses(cls: Any) -> list[Any]:
    found: list[Any] = []
    for subclass in cls.__subclasses__():
        found += [subclass, *_subclasses(subclass)]
    return found


def _seed_trl_trainer(cls: Any) -> None:
    """TRL's trainers of the trl extension seed the process with ``args.seed`` as they start.

    ``SFTTrainer`` and ``DPOTrainer`` wrap the model with ``get_peft_model`` (``trl sft
    --use_peft``) before ``Trainer.__init__`` seeds the process: the LoRA adapter's initial
    weights come from torch's default generator, which each process seeds at random, so two
    uninterrupted runs of the same command differ and no resume could equal either. Under the
    integration the seed the Trainer sets a moment later is set first; TRL draws nothing else
    before it (a full fine-tuning trains the same bits as without the integration).
    """
    from nodus.stages.hf.inprocess.profile import TRL_TRAINERS

    name = f"{cls.__module__}.{cls.__qualname__}"
    if name not in TRL_TRAINERS or getattr(cls.__init__, "_nodus_seeded", False):
        return
    original = cls.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if protocol.ControlPaths.from_environment() is not None:
            from transformers import set_seed

            config = signature.bind_partial(self, *args, **kwargs).arguments.get("args")
            set_seed(int(getattr(config, "seed", None) or _DEFAULT_SEED))
        original(self, *args, **kwargs)

    __init__._nodus_seeded = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


_DEFAULT_SEED = 42
"""``TrainingArguments.seed``'s default: the seed of a TRL trainer built without ``args``."""


def _epoch_preserving(skip_first_batches):
    """Fix the resumed partial epoch's batch order (docs/hf-trainer.md, a defect of Accelerate).

    Accelerate's ``skip_first_batches`` builds a new ``DataLoaderShard`` whose ``iteration``
    starts at 0; its ``__iter__`` calls ``set_epoch(self.iteration)`` on the shared seedable
    sampler, so the rest of a partial epoch e >= 1 is drawn in epoch 0's order. The Trainer has
    already called ``set_epoch(e)`` on the original loader: carry that epoch over.
    """

    @functools.wraps(skip_first_batches)
    def wrapper(dataloader, num_batches=0):
        skipping = skip_first_batches(dataloader, num_batches)
        epoch = getattr(dataloader, "iteration", None)
        if epoch is not None and hasattr(skipping, "iteration"):
            skipping.iteration = epoch
        return skipping

    return wrapper
