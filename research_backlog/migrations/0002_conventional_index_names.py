# Index names follow <app>_<model>_<purpose>; RenameIndex is ALTER INDEX ... RENAME (no rebuild).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('research_backlog', '0001_initial'),
    ]

    operations = [
        migrations.RenameIndex(
            model_name='claimreview',
            new_name='research_claim_review_pending',
            old_name='claim_review_pending',
        ),
        migrations.RenameIndex(
            model_name='claimreview',
            new_name='research_claim_review_resolved',
            old_name='claim_review_resolved_at',
        ),
        migrations.RenameIndex(
            model_name='researchrequest',
            new_name='research_request_pending_fifo',
            old_name='research_pending_fifo',
        ),
        migrations.RenameIndex(
            model_name='researchrequest',
            new_name='research_request_type_fifo',
            old_name='research_pending_type_fifo',
        ),
        migrations.RenameIndex(
            model_name='researchrequest',
            new_name='research_request_dispatched',
            old_name='research_dispatched_at',
        ),
        migrations.RenameIndex(
            model_name='researchrequest',
            new_name='research_request_completed',
            old_name='research_status_completed',
        ),
    ]
