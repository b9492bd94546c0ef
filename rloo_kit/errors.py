"""The kit's errors. Each one says what was wrong and what to do about it.

They subclass the built-in error a caller would already catch (ValueError, OSError,
MemoryError), so code written against plain Python keeps working.
"""


class RlooKitError(Exception):
    """Base class for every error raised by rloo_kit on bad input or a failed run."""


class ConfigError(RlooKitError, ValueError):
    """A preset, backend or training setting that cannot work."""


class ModelTooLargeError(ConfigError):
    """The model's estimated memory does not fit the device or the chosen preset."""


class DataError(RlooKitError, ValueError):
    """A dataset that lacks what training or a reward needs."""


class RewardError(RlooKitError, ValueError):
    """A reward function that broke its contract (wrong length, non-numbers, an exception under strict)."""


class ModelSourceError(RlooKitError, OSError):
    """A model name that is neither a local path nor a reachable hub id."""


class GPUOutOfMemoryError(RlooKitError, MemoryError):
    """CUDA ran out of memory; the message names a smaller preset and settings that fit."""


class ExportError(RlooKitError, ValueError):
    """An adapter that cannot leave the kit as asked: unsupported architecture or quantization, an output that
    exists, a base model that does not fit the adapter, a full disk, or no llama.cpp runtime to check it with."""


class RunRefused(RlooKitError):
    """The pre-flight says the run that would be trained cannot learn, and it was not forced."""
