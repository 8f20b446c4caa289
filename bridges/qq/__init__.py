"""QQ bridge over OneBot v11: ``parse`` (pure event parsing) and ``cqcode``."""
