"""Notification webhooks (SPEC §11): one signed, guarded HTTP delivery and its outcome.

``sign`` and ``headers`` make Standard Webhooks signatures; ``check_url`` decides, after DNS
resolution, whether a URL may be called under a ``WebhookPolicy``; ``send`` makes one attempt
and returns an ``Outcome`` that says whether it was delivered and whether to try again. Retries,
backoff and records belong to the activity that calls ``send``.
"""

from errands.adapters.webhooks._guard import Resolved, WebhookPolicy, check_url, non_public
from errands.adapters.webhooks._send import Outcome, retry_after, send
from errands.adapters.webhooks._sign import headers, new_secret, sign

__all__ = [
    "Outcome",
    "Resolved",
    "WebhookPolicy",
    "check_url",
    "headers",
    "new_secret",
    "non_public",
    "retry_after",
    "send",
    "sign",
]
