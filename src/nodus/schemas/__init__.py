"""The workload file: models, defaults and resolution."""
