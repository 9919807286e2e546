"""Every error the serving harness raises on purpose.

    SutError
     ├── ConfigError       an unknown option or a bad value; names the key
     ├── InvalidInput      a request whose tensors do not match the model's specs
     ├── Overloaded        the request queue is full; the request was not queued
     ├── RequestTimeout    the request expired in the queue and was not run
     └── ModelLoadError    a model could not be found, built, loaded or warmed up

A plain `SutError` reports everything else (a service that is not running, a
batch whose inference raised).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "InvalidInput",
    "ModelLoadError",
    "Overloaded",
    "RequestTimeout",
    "SutError",
]


class SutError(Exception):
    """Base of every error sut raises on purpose."""


class ConfigError(SutError):
    """An option is unknown or has a bad value; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class InvalidInput(SutError):
    """A request's tensors do not match the model's input specs."""


class Overloaded(SutError):
    """The queue holds `max_queue_size` requests; this one was rejected."""


class RequestTimeout(SutError):
    """The request's timeout passed while it waited in the queue; it was not run."""


class ModelLoadError(SutError):
    """A model could not be found, built, loaded or warmed up."""
