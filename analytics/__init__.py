"""What the notebooks call: analysis of the service database, and the partners' documentation.

``load`` reads the tables into pandas frames (emails masked on the way out), ``waitlist`` and
``deliveries`` are pure functions on those frames, ``charts`` turns their answers into matplotlib
figures. Every answer is sorted and rounded so notebook outputs are identical from run to run.

``event_docs`` renders the event catalog for partners; ``live`` runs the real service in-process
with an injected clock; ``demo`` drives it to make seeded demo data; ``render`` re-runs notebooks.
"""

from analytics.privacy import email_hash, mask_email, redact_emails

__all__ = ["email_hash", "mask_email", "redact_emails"]
