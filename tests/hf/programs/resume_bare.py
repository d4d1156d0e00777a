"""The quick-start program, resumed by a bare Trainer from the checkpoint in $RESUME_FROM.

Used to show that integration checkpoints are ordinary Trainer checkpoints, and to reproduce
the upstream defect nodus fixes (a resume inside epoch >= 1 is not bit-identical).
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import train  # noqa: E402  (the quick-start train.py in the working copy)
from transformers import Trainer, set_seed  # noqa: E402

args = train.training_arguments()
tokenizer = train.build_tokenizer()
set_seed(args.seed)
model = train.build_model(tokenizer)
trainer = Trainer(model=model, args=args, train_dataset=train.build_dataset(tokenizer),
                  processing_class=tokenizer)
trainer.train(resume_from_checkpoint=os.environ["RESUME_FROM"])
trainer.save_model("out/model")
