"""Leads: the one write in AAP.

``lead.submit`` validates consent, links the vehicle, books or proposes an
appointment and stores the lead, its consent record and its outbox rows in one
transaction before answering. A delivery worker then sends each lead to the
dealer's CRM (ADF/XML over HTTP or e-mail, or a JSON webhook), retrying with
backoff, and never after the customer's consent has expired.

Modules, one concept each (the ``[leads]`` table is :mod:`aap.config.leads`):
:mod:`consent` (validation and error codes),
:mod:`vehicles` (linking to a listing), :mod:`appointments` (schedules and
slots), :mod:`idempotency` (canonical payload hash), :mod:`aap.store.leads`
(tables and SQL), :mod:`submit` (the submit transaction), :mod:`adf` (the XML
document), :mod:`transports` (HTTP, SMTP, webhook), :mod:`worker` (the
outbox loop), :mod:`notify` (the new-lead e-mail to a rooftop's sales people),
:mod:`pipeline` (working a lead: status, owner, follow-up, notes). Timestamps are read and
written by :mod:`aap.util.rfc3339`.
"""
