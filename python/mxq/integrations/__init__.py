"""Integrations with training frameworks. Each submodule imports its framework when imported itself; ``import mxq``
imports none of them.

- :mod:`mxq.integrations.torchtitan`: TorchTitan's model converter (docs/training.md, "With TorchTitan").
"""
