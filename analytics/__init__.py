"""Analysis of the service database for the team's notebooks.

``load`` reads the tables into pandas frames (emails masked on the way out), ``waitlist`` and
``deliveries`` are pure functions on those frames, ``charts`` turns their answers into matplotlib
figures. Every answer is sorted and rounded so notebook outputs are identical from run to run.
"""

from analytics.privacy import email_hash, mask_email, redact_emails

__all__ = ["email_hash", "mask_email", "redact_emails"]
