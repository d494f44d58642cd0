"""The gateway: who may talk to a served kernel, and how (credentials, sockets, TLS, limits, the audit log).

It sits between the client operators and the kernel. It never reads private data: it passes request text to
the authenticated analyst's own ``Kernel``. What protects the people in the table rests on ``kernel/`` alone
(each analyst's kernel charges that analyst's share, and the shares fit in the total: ``kernel/ledger.py``); the
gateway keeps analysts apart from each other and the service up (docs/service.md).
"""
