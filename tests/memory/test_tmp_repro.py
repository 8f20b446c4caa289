from datetime import datetime, timedelta, timezone
from memory.capture import capture
from memory.types import ChatKind, ChatRef
DM = ChatRef("tg", ChatKind.PRIVATE, "1001")
T0 = datetime.now(timezone.utc) - timedelta(days=1)

def test_repro(core, namespace):
    a = capture(core, namespace, "我下周三要去上海出差", chat=DM, said_at=T0, message_id="1", addressed=True)
    print([(r.action, r.memory.id, r.memory.key, r.memory.text) for r in a])
    b = capture(core, namespace, "我下个月要搬去深圳了。", chat=DM, said_at=T0 + timedelta(minutes=1), message_id="2", addressed=True)
    print([(r.action, r.memory.id, r.memory.key, r.memory.text, getattr(r, 'reason', None)) for r in b])
    print([(m.id, m.key, m.text) for m in core.list(namespace)] if hasattr(core, 'list') else '')
    assert 0
