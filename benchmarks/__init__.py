"""Reproducible performance runs of LakeVilla for Jupyter (not tests): ``python benchmarks/run.py``."""
