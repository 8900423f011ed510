"""Build scripts; run each as a module from the repository root: ``python -m scripts.build_examples``."""
