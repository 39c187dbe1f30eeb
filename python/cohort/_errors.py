"""cohort's exceptions: one class per libdist status code, all under cohort.Error.

Each also derives from the built-in exception a Python program would catch for it
(DeadlineExceededError is a TimeoutError, InvalidArgumentError a ValueError, ...), and carries
libdist's message unchanged.
"""

from . import _cohort


class Error(Exception):
    """A libdist call failed. `code` is the status code's name (e.g. "DEADLINE_EXCEEDED")."""

    code = "UNKNOWN"


class CancelledError(Error):
    code = "CANCELLED"


class UnknownError(Error):
    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    """A process of the job failed (the message names it), or the communicator was aborted."""

    code = "ABORTED"


class OutOfRangeError(Error):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    code = "UNAVAILABLE"


class DataLossError(Error):
    code = "DATA_LOSS"


class UnauthenticatedError(Error, PermissionError):
    code = "UNAUTHENTICATED"


# absl::StatusCode numbers (the same as gRPC's).
_BY_CODE = {
    1: CancelledError,
    2: UnknownError,
    3: InvalidArgumentError,
    4: DeadlineExceededError,
    5: NotFoundError,
    6: AlreadyExistsError,
    7: PermissionDeniedError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    10: AbortedError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
    15: DataLossError,
    16: UnauthenticatedError,
}

__all__ = ["Error"] + [cls.__name__ for cls in _BY_CODE.values()]

# Raised by the bindings themselves: no Python frame around a call (docs/benchmarks.md).
_cohort._register_errors(_BY_CODE)
