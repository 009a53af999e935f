"""polypath's lab: the papers' experiments, run on the polypath simulator.

Each experiment module under :mod:`polypath_lab.experiments` builds scenario variants from a
bundled scenario under ``scenarios/``, runs them through the ``polypath sim run`` command
(several seeds, two at a time), reads the run's JSON summary and CSV series, and returns
tables (paper figure | polypath reproduction | polypath's best configuration), plots and
shape checks. :mod:`polypath_lab.report` writes them to ``report/``.

Run ``python -m polypath_lab run all`` (or one experiment by name); ``make demo`` does this
with the default seeds.
"""
