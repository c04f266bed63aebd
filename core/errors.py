"""Errors that services raise and the API turns into 4xx responses.

Services stay independent of DRF; ``core.api.exception_handler`` maps these.
"""

from __future__ import annotations


class ServiceError(Exception):
    status_code = 400

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field

    def as_body(self) -> dict[str, object]:
        if self.field:
            return {self.field: [self.detail]}
        return {"detail": self.detail}


class InvalidInput(ServiceError):
    status_code = 400


class NotFound(ServiceError):
    status_code = 404


class Forbidden(ServiceError):
    status_code = 403


class Conflict(ServiceError):
    status_code = 409
