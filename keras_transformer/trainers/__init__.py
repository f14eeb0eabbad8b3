"""The command-line programs over the library: train, evaluate, average_checkpoints, export,
translate, visualize, import_pretrained (import_marian), saved_model_cli. Each runs as
`python -m keras_transformer.trainers.NAME`, as the console script `kt-NAME` (dashes for
underscores), or from the repository's root as `python -m trainers.NAME` (the former name,
kept as an alias). Beside them: experiment (the YAML configuration), run_dir (the run
directory and every path in it), errors (the error types and exit statuses), runtime
(strategies), checkpointing, callbacks, flags, provenance and startup_logs.

TensorFlow's C++ INFO and WARNING lines (oneDNN and CUDA notices, XLA's "Ignoring Assert
operator") are hidden by default in the programs, those written while TensorFlow loads
included, with the failed CUDA probe of a machine without a GPU (startup_logs, which `import
keras_transformer` runs before TensorFlow loads); set TF_CPP_MIN_LOG_LEVEL=0 to see them.
Other errors are always shown.
"""

PROGRAMS = (
    "train",
    "evaluate",
    "average_checkpoints",
    "export",
    "translate",
    "visualize",
    "import_pretrained",
    "import_marian",
    "saved_model_cli",
)  # the modules that run as programs (each has `main`)

__all__ = ["PROGRAMS"]
