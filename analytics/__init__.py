"""What the notebooks call: analysis of the service database, and the partners' documentation.

``load`` reads the tables into pandas frames (emails masked on the way out), ``waitlist`` and
``deliveries`` are pure functions on those frames, ``charts`` turns their answers into matplotlib
figures. Every answer is sorted and rounded so notebook outputs are identical from run to run.

``event_docs`` renders the event catalog for partners; ``render`` re-runs notebooks. Nothing here
starts the service: the seeded demo database the notebooks read by default is made by driving it,
in ``service.demo``.
"""

from analytics.privacy import email_hash, mask_email, redact_emails

__all__ = ["email_hash", "mask_email", "redact_emails"]
