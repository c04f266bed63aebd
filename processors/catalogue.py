"""The processors this code base can send text to, and what each receives.

Pure data, no Django models: ``pathways.embeddings`` and ``research_backlog.dispatcher``
name their processor by key from here, and the registry rows (``processors.models``) are
created from these entries (``services.register``). A processor that never leaves the host
(``leaves_host=False``: the local model, the hash embedding) is built in: the gate lets it
through without asking the database.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class Category(models.TextChoices):
    """What kind of text a processor receives (docs/processors.md, "Data categories")."""

    # pathways.embeddings.pathway_text: a pathway's trigger type and trigger ref, e.g.
    # "user question: benchmark/run-7/case-3" (a ref may name a patient-specific case).
    PATHWAY_TEXT = "pathway_text", "Pathway text (trigger type and trigger ref)"
    # research_backlog.dispatcher.request_document: the question, trigger and reason of a
    # research request (free text written by agents and operators).
    RESEARCH_QUESTION = "research_question", "Research question (question, trigger, reason)"


@dataclass(frozen=True)
class Known:
    key: str
    display_name: str
    data_categories: tuple[str, ...]
    leaves_host: bool


OPENAI = "openai"
VOYAGE = "voyage"
RESEARCH_DISPATCHER = "research_dispatcher"
LOCAL_MINILM = "local_minilm"
HASH_BUCKET = "hash_bucket"

KNOWN: dict[str, Known] = {
    known.key: known
    for known in (
        Known(OPENAI, "OpenAI embeddings (text-embedding-3-small)", (Category.PATHWAY_TEXT,), True),
        Known(VOYAGE, "Voyage AI embeddings (voyage-3.5-lite)", (Category.PATHWAY_TEXT,), True),
        Known(RESEARCH_DISPATCHER, "Research dispatcher webhook", (Category.RESEARCH_QUESTION,), True),
        Known(LOCAL_MINILM, "Local MiniLM model (on this host)", (Category.PATHWAY_TEXT,), False),
        Known(HASH_BUCKET, "Hash embedding (on this host)", (Category.PATHWAY_TEXT,), False),
    )
}

# PATHWAY_EMBEDDING_MODEL -> the processor that receives the texts it embeds.
EMBEDDING_PROCESSORS: dict[str, str] = {
    "hash_bucket_v1": HASH_BUCKET,
    "local_minilm_l6_v2": LOCAL_MINILM,
    "openai_text_3_small": OPENAI,
    "voyage_3_5_lite": VOYAGE,
}


def is_builtin(key: str) -> bool:
    known = KNOWN.get(key)
    return known is not None and not known.leaves_host
