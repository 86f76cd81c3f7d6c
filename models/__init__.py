"""The blrgraph model zoo: readable model files to copy and adapt.

Each module has ``build(data, **options) -> Model`` and ``summarize(fit)``.
In a source checkout they live in ``models/``; an installed blrgraph ships the
same files as the package ``blrgraph.zoo``.
"""
