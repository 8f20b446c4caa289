"""The character's chat prompt: the messages the companion's reply is asked
with. Persona system prompt, the recollection in a delimited block with the
memory-not-instructions rule (texts from ``memory.model_prompts``), then the
chat tail as user/assistant turns."""

from __future__ import annotations

from collections.abc import Sequence

from memory.model_prompts import RECOLLECTION_CLOSE, RECOLLECTION_OPEN, escape_block, recollection_instruction
from memory.store import ChatLine

__all__ = ["build_messages"]


def build_messages(*, persona: str, recollection: str, tail: Sequence[ChatLine], lang: str,
                   group: bool = False) -> list[dict[str, str]]:
    """OpenAI chat messages: ``[system persona (+ recollection block), *tail]``.

    In group chats user lines are prefixed with the speaker's name so the model
    knows who said what. Memory and chat texts are escaped inside the block.
    """
    system = persona.strip()
    if recollection.strip():
        system += "\n\n" + recollection_instruction(lang) + "\n" + RECOLLECTION_OPEN + "\n" + \
            escape_block(recollection.strip()) + "\n" + RECOLLECTION_CLOSE
    messages = [{"role": "system", "content": system}]
    for line in tail:
        if line.role == "bot":
            messages.append({"role": "assistant", "content": line.text})
        else:
            who = line.sender_name or line.sender_id
            content = f"{who}: {line.text}" if group else line.text
            messages.append({"role": "user", "content": content})
    return messages
