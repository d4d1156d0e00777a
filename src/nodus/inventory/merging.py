"""``--artifact model`` of a LoRA checkpoint: its adapter merged into the run's base model.

A managed method's checkpoint (``nodus.schemas.method_specs.METHODS``, with ``lora_rank``)
holds the adapter, not a model. Its run recorded the base model's folder, and that folder's
fingerprint, when it was accepted (``ResolvedWorkload.method``), so a download can give what
"the model" means to a user: merged weights that load with ``AutoModelForCausalLM`` and
generate. The snapshot's weights (adapter and tokenizer) are laid out verified, the base model
is checked against its fingerprint, and the adapter is merged by the export stage's own code
(:func:`nodus.stages.methods.export.merge`). :mod:`nodus.inventory.download` lays the files
out and builds the model in a folder next to ``--to``, renamed into place once whole, like
every other download; this module says which base model, and merges.

torch, PEFT and Transformers are imported on this path only, never by the command line
otherwise.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from nodus.store import SnapshotStore

__all__ = ["base_model_of", "merge"]

_ADAPTER_ONLY = "--artifact adapter gives the adapter alone"


def base_model_of(store: SnapshotStore, manifest: Any, run: Any | None) -> str:
    """The base model folder the run trained its adapter on, still as it was when accepted."""
    from nodus.schemas.method_specs import in_words
    from nodus.schemas.methods import content_fingerprint

    method = _recorded_method(store, manifest, run)
    base_model = method.get("base_model")
    if not base_model:
        raise NotFoundError(
            f"{manifest.id} holds a LoRA adapter, and its run {manifest.run} is not a managed "
            f"method (framework {in_words()}), so nodus does not know its base model: use "
            "--artifact adapter and load it on the base model with PeftModel.from_pretrained"
        )
    if not os.path.isdir(base_model):
        raise NotFoundError(
            f"{manifest.id} holds a LoRA adapter; merging it needs the run's base model "
            f"{base_model}, which is gone; {_ADAPTER_ONLY}"
        )
    recorded = method.get("base_model_fingerprint")
    if recorded:  # runs accepted before the fingerprint was recorded have none
        now = content_fingerprint(base_model)
        if now != recorded:
            raise UsageError(
                f"{manifest.id} holds a LoRA adapter trained on the base model {base_model}, "
                f"whose content changed since {manifest.run} was accepted (it was {recorded}, "
                f"it is {now}): merged into it the adapter would not give the trained model; "
                f"{_ADAPTER_ONLY}"
            )
    return str(base_model)


def _recorded_method(store: SnapshotStore, manifest: Any, run: Any | None) -> dict[str, Any]:
    """The run's resolved ``[method]``: the catalog's, else the run record in the store (a run
    this catalog never saw)."""
    if run is not None:
        workload = run.workload
    else:
        from nodus.store.run_records import RunRecords

        record = RunRecords(store.storage).read(manifest.run) or {}
        workload = record.get("workload") or {}
    return dict(workload.get("method") or {})


def merge(manifest: Any, base_model: str, adapter: str, destination: str) -> None:
    """The export stage's merge (adapter and tokenizer folder into ``destination``), with its
    failures said as refusals."""
    from nodus.stages.methods import export

    try:
        export.merge(base_model, adapter, destination)
    except ImportError as error:
        raise UsageError(
            f"merging the LoRA adapter of {manifest.id} needs PEFT and Transformers ({error}); "
            f"install nodus's 'methods' extra, or {_ADAPTER_ONLY}"
        ) from None
    except (OSError, ValueError, RuntimeError) as error:
        raise UsageError(
            f"the LoRA adapter of {manifest.id} could not be merged into the base model "
            f"{base_model}: {error}; {_ADAPTER_ONLY}"
        ) from None
