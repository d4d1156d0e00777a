"""Stage execution contracts: the directory contract and the hf-trainer-v1 integration."""
