"""Offline evaluations on labelled data: ``recall`` (LoCoMo, DuLeMon and
LongMemEval through the real recall, capture and turn) and ``grounding`` (the
recollection's validator over labelled cases). Run by ``huiyi eval``
(``gateway.cli.evaluate``) and ``python -m bench``. It imports the memory and
``bridges.contract``, never the gateway: turn mode is handed its pipeline
(``recall.MakeTurns``)."""
