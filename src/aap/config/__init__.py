"""The deployment's configuration: one TOML file read into a typed, validated ``Settings``.

Start at :mod:`aap.config.loader`; ``docs/configuration.md`` describes every key.
"""
