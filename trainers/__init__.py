"""Command-line programs over the keras_transformer library: train, evaluate,
average_checkpoints, export, translate, visualize."""
