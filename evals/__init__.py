"""Offline evaluations of the memory on labelled data: ``recall`` (LoCoMo,
DuLeMon, LongMemEval through the real recall, capture and turn). Run by
``huiyi eval`` (``gateway.cli.evaluate``) and ``python -m bench``."""
