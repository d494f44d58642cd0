"""The query layer's client side: a batch of labelled queries (counts, sums, means, quantiles by group) as data
(``model``), compiled to one workload over a schema's domain and answered jointly from one estimate.

Both front ends build the same :mod:`.model` values: the builder (``ek.query(...)``) and SQL (``ek.sql(...)``).
"""
