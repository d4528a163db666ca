"""Kubeflow Pipelines v2: everything the project needs to run there.

- compiler.py: `create_pipeline(config)` compiled into a KFP v2 pipeline
  spec (`python -m pipeline compile-kubeflow`);
- run_compiled.py: a local executor of such specs, as KFP's backend runs
  them (`python -m pipeline run-compiled`);
- Dockerfile: the image every task starts;
- README.md: building the image, uploading, GPUs, several machines.

Layering: commands -> kubeflow -> pipeline -> components -> trainer_module.
The commands (flags in commands/cli/kubeflow_flags.py, handlers in
commands/runs/kfp.py) call it; nothing below imports this package. Its tests are tests/kubeflow/.
"""
