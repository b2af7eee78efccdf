"""Algorithms written once over generic functions: no device code in here."""

from . import ppo, sac, td3  # noqa: F401
