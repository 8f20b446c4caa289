"""Telegram Bot API bridge: ``parse`` (pure Update/Message parsing)."""
