"""The quick-start program resumed by a bare ``Trainer`` (no nodus) from ``$RESUME_FROM``.

Run in a copy of examples/quickstart. It shows that integration checkpoints and
``--artifact resumable`` downloads are ordinary Trainer checkpoints, and reproduces the upstream
defect nodus fixes (a bare resume inside epoch >= 1 is not bit-identical). It writes the final
model to ``out/model`` and the global step the Trainer reached to ``out/global_step``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import train
from transformers import Trainer, set_seed

args = train.training_arguments()
tokenizer = train.build_tokenizer()
set_seed(args.seed)
model = train.build_model(tokenizer)
trainer = Trainer(
    model=model, args=args, train_dataset=train.build_dataset(tokenizer), processing_class=tokenizer
)
trainer.train(resume_from_checkpoint=os.environ["RESUME_FROM"])
trainer.save_model("out/model")
with open("out/global_step", "w") as handle:
    handle.write(str(trainer.state.global_step))
