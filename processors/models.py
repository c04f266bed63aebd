"""The registry of external processors: who may receive text that leaves this system.

One ``Processor`` row per key of ``processors.catalogue.KNOWN`` once registered; every
change goes through ``processors.services`` (audited). ``ProcessorRefusal`` holds one row
per processor, cause and hour in which the gate refused a call: its unique constraint is
what makes the refusal audited once per hour however many workers are refused at once.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class Processor(models.Model):
    class Status(models.TextChoices):
        # A business associate agreement covers it: it receives text.
        ACTIVE = "active", "Active"
        # Agreement in progress: refused, except with PROCESSOR_DEV_OVERRIDE (audited per call).
        PENDING_COMPLIANCE = "pending_compliance", "Pending compliance"
        # No longer covered: refused.
        REVOKED = "revoked", "Revoked"

    key = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=200)
    # False for the built-ins (local model, hash embedding): the gate never asks about them.
    leaves_host = models.BooleanField(default=True)
    # Labels of processors.catalogue.Category: what kinds of text it may receive.
    data_categories = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.PENDING_COMPLIANCE)
    agreement_ref = models.CharField(max_length=200, blank=True, default="")
    agreement_signed_on = models.DateField(null=True, blank=True)
    # After this day an active processor is refused (cause "agreement_expired").
    agreement_expires_on = models.DateField(null=True, blank=True)
    changed_by = models.CharField(max_length=200)
    changed_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("key",)
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["active", "pending_compliance", "revoked"]),
                name="processors_processor_status_known",
            ),
            models.CheckConstraint(
                condition=models.Q(agreement_expires_on__isnull=True)
                | models.Q(agreement_signed_on__isnull=True)
                | models.Q(agreement_expires_on__gte=models.F("agreement_signed_on")),
                name="processors_processor_agreement_dates_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


class ProcessorRefusal(models.Model):
    """The first refused call of an hour for one processor and cause (the one audited)."""

    processor_key = models.CharField(max_length=64)
    cause = models.CharField(max_length=64)
    hour = models.DateTimeField()  # the refusal's time truncated to the hour (UTC)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # INSERT ... ON CONFLICT DO NOTHING on this decides which worker audits the hour.
            models.UniqueConstraint(fields=["processor_key", "cause", "hour"], name="processors_refusal_once_per_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.processor_key} refused ({self.cause}) in the hour of {self.hour:%Y-%m-%d %H:00}"
