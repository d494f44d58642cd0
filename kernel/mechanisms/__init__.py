"""The vetted mechanisms, one module per family, each opening with its card (neighbours, sensitivity, cost, what
reads data, what may fail before the charge, and the section of docs/privacy/ that proves it): ``laplace``,
``gaussian``, ``exponential`` (worst-approx), ``dawa``, ``php``, ``efpa``, ``structure_first``, ``privbayes``;
``release`` is the grid and noise draw the linear ones share."""
