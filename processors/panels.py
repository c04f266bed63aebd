"""What operator pages show about the processor behind a configured model."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from processors.catalogue import EMBEDDING_PROCESSORS, KNOWN
from processors.models import Processor


@dataclass(frozen=True)
class ProcessorBadge:
    key: str
    display_name: str
    status: str  # "built_in", "not_registered", or a Processor.Status value
    label: str
    sends_text: bool  # whether texts reach it now (active, or pending under the override)

    @property
    def chip(self) -> str:
        """The site.css chip: green when texts may go, amber when pending, grey when refused."""
        if self.sends_text:
            return "chip-mature"
        return "chip-growing" if self.status == Processor.Status.PENDING_COMPLIANCE else "chip-sparse"


def embedding_processor_badge(model_name: str) -> ProcessorBadge:
    """The processor receiving ``model_name``'s texts and its registry status. Built-ins
    cost no query; an outbound processor one."""
    key = EMBEDDING_PROCESSORS.get(model_name, "")
    known = KNOWN.get(key)
    if known is None:
        return ProcessorBadge(key, model_name, "not_registered", "not in the registry", False)
    if not known.leaves_host:
        return ProcessorBadge(key, known.display_name, "built_in", "built in: texts never leave this host", True)
    row = Processor.objects.filter(key=key).values_list("display_name", "status", "agreement_expires_on").first()
    if row is None:
        return ProcessorBadge(key, known.display_name, "not_registered", "not registered: nothing is sent", False)
    name, status, expires_on = row
    if status == Processor.Status.ACTIVE:
        if expires_on is not None and expires_on < timezone.localdate():
            return ProcessorBadge(key, name, status, f"agreement expired on {expires_on}: nothing is sent", False)
        return ProcessorBadge(key, name, status, "active: an agreement covers it", True)
    if status == Processor.Status.PENDING_COMPLIANCE and settings.PROCESSOR_DEV_OVERRIDE:
        return ProcessorBadge(key, name, status, "pending compliance: sent under the dev override", True)
    label = Processor.Status(status).label.lower()
    return ProcessorBadge(key, name, status, f"{label}: nothing is sent, matching is structural only", False)
