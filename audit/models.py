"""The append-only audit trail and its hash chain.

Two tables, both INSERT-only (a trigger rejects UPDATE and DELETE):

* ``AuditEvent`` — written by ``audit.services.record`` inside the transaction of the
  change it describes. It stores its canonical bytes, which are what gets hashed.
* ``AuditChainLink`` — the chain: link ``n`` binds one event to link ``n - 1`` with
  ``hash = sha256(prev_hash | position | event id | canonical)``. Links are appended by
  the single chainer (``audit.chain``) under an advisory lock, so the chain is linear
  whatever the number of writers, and writers never wait on a chain-head lock.

``AuditPending`` is the queue of committed events the chainer has not linked yet.
"""

from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    # The sequence number: allocated at insert, so gaps (rolled-back writers) are normal.
    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=100)
    actor = models.CharField(max_length=200)
    target_type = models.CharField(max_length=100, blank=True, default="")
    target_id = models.CharField(max_length=100, blank=True, default="")
    payload = models.JSONField(default=dict)
    # Stamped by the database (trigger audit_event_stamp, migration 0005): no writer backdates an event.
    created_at = models.DateTimeField()
    canonical = models.BinaryField()

    class Meta:
        db_table = "audit_event"
        indexes = [
            # Serves "what happened to this record": the flow DAG page, incident response.
            models.Index(fields=["target_type", "target_id", "id"], name="audit_event_target"),
            # Serves tests and operators filtering the trail by action.
            models.Index(fields=["action", "id"], name="audit_event_action"),
        ]
        # Operators who may run an access report (incident response) on its page.
        permissions = [("run_access_report", "Can run access reports over the audit log")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.action} by {self.actor}"


class AuditChainLink(models.Model):
    position = models.BigIntegerField(primary_key=True)
    # No foreign key on purpose: a removed event must show up as a broken link in
    # audit_verify, not be prevented by (or cascade through) a constraint.
    event_id = models.BigIntegerField(unique=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    # Stamped by the database (trigger audit_chain_link_stamp, migration 0005).
    linked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "audit_chain_link"

    def __str__(self) -> str:
        return f"link {self.position} -> event {self.event_id}"


class AuditPending(models.Model):
    event_id = models.BigIntegerField(primary_key=True)

    class Meta:
        db_table = "audit_pending"

    def __str__(self) -> str:
        return f"event {self.event_id} awaiting chaining"


class AuditTreeNode(models.Model):
    """A complete subtree of the Merkle tree over the chain (docs/audit-log.md, "The Merkle
    tree"): level 0 holds the leaf hashes (``idx`` = chain position - 1), level ``k`` index
    ``j`` the hash of leaves ``j * 2**k`` to ``(j + 1) * 2**k - 1``. Written by the chainer
    with the links; INSERT-only like them."""

    pk = models.CompositePrimaryKey("level", "idx")
    level = models.SmallIntegerField()
    idx = models.BigIntegerField()
    hash = models.BinaryField()

    class Meta:
        db_table = "audit_tree_node"

    def __str__(self) -> str:
        return f"tree node {self.level}/{self.idx}"


class AuditCheckpoint(models.Model):
    """A signed tree head: the C2SP checkpoint of the tree at ``tree_size`` leaves, as a
    signed note. INSERT-only (trigger ``audit_checkpoint_append_only``)."""

    id = models.BigAutoField(primary_key=True)
    origin = models.CharField(max_length=200)
    tree_size = models.BigIntegerField()
    root_hash = models.BinaryField()
    key_id = models.CharField(max_length=8)  # hex, of the key that signed it
    note = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "audit_checkpoint"
        indexes = [models.Index(fields=["tree_size", "id"], name="audit_checkpoint_size")]

    def __str__(self) -> str:
        return f"checkpoint {self.id} at size {self.tree_size}"


class AuditDroppedPartition(models.Model):
    """A month of audit events dropped by retention (``AUDIT_RETENTION_DAYS``,
    ``audit.retention``). Written by the owner role in the transaction that drops the
    partition, only once a signed checkpoint covers every event in it; the application may
    only read it. ``audit_verify`` starts its walk after the highest ``last_position`` here:
    the links and tree nodes before it stay, and the checkpoint vouches for them."""

    name = models.CharField(max_length=100, unique=True)
    month = models.DateTimeField()
    events = models.BigIntegerField()
    first_position = models.BigIntegerField()
    last_position = models.BigIntegerField()
    # The signed checkpoint (audit_checkpoint.id) whose tree covered last_position.
    checkpoint_id = models.BigIntegerField()
    dropped_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "audit_dropped_partition"

    def __str__(self) -> str:
        return f"{self.name} ({self.events} events, positions {self.first_position}-{self.last_position})"
