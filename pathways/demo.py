"""Demo pathways for ``load_demo``: extracted from the demo flows, with some reuse."""

from __future__ import annotations

from django.conf import settings

from pathways.jobs import backfill_embeddings
from pathways.models import Pathway
from pathways.services import disqualifier, extract_pathway, record_hit
from reasoning.models import ReasoningFlow

DEMO_ACTOR = "system:demo"


def load_demo_data() -> str:
    """Extract a pathway from every qualifying demo flow (closing a flow usually has done
    it already), then give the demo pathways a few reuses once, so the library shows
    mature and growing families. Idempotent."""
    flows = ReasoningFlow.objects.completed().filter(trace_id__startswith="demo-trace-")
    new = 0
    for flow in flows.order_by("created_at"):
        # Only qualifying flows without a pathway: a skipped extraction would audit again on every run.
        if disqualifier(flow) is not None or Pathway.objects.filter(seed_flow_id=flow.pk).exists():
            continue
        new += extract_pathway(flow.pk, actor=DEMO_ACTOR) is not None
    demo = Pathway.objects.filter(seed_flow__trace_id__startswith="demo-trace-").order_by("seed_flow__created_at")
    if not demo.filter(hit_count__gt=0).exists():
        for index, pathway_id in enumerate(demo.values_list("pk", flat=True)):
            for _ in range(index % 5):
                record_hit(pathway_id, actor=DEMO_ACTOR)
    # Embed them now (the hourly backfill would) so semantic matching works at once.
    embedded = 0
    if Pathway.objects.needing_embedding(settings.PATHWAY_EMBEDDING_MODEL).exists():
        embedded = backfill_embeddings()
    return f"{demo.count()} pathways ({new} new, {embedded} embedded)"
