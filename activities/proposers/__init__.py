"""Proposers: what writes the next candidate kernels of a run.

``search`` (the default) explores a problem's declared knob space with an evolutionary
strategy and needs nothing outside; ``llm`` asks an OpenAI-compatible endpoint. Both sit
behind ``base.Proposer`` and are chosen by ``ProposerConfig.kind``.
"""
