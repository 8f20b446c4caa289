"""What capture and its speech-act stage both read off a sentence, below either
of them: the category keyword groups (``guess_category``), instruction-like text
(``is_instruction_like``), the pet species and relation words a name is not,
the gateway's own words (``is_gateway_text``: a client echoing the
recollection, or a person pasting it, must not teach the gateway its own
output), the text the slot patterns read (``_slot_text``) and the one
chit-chat word test (``names_nothing``, over ``content_terms``) under the
speech-act stage's chit-chat decision.

``memory.capture`` re-exports every name; ``memory.speech_act`` imports them
from here, so neither imports the other back.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from memory.text import is_cjk, is_filler, normalise, split_sentences, stem, to_simplified, tokens, words
from memory.types import Category

__all__ = ["guess_category", "is_instruction_like", "is_gateway_text", "MIN_ECHO_CHARS", "REACTION_WORDS", "content_terms",
           "names_nothing", "reaction_stems", "UPTAKE_WORDS", "uptake_alone", "uptake_only", "uptake_terms"]

_CATEGORY_WORDS: tuple[tuple[Category, re.Pattern[str]], ...] = (
    (Category.PROFILE, re.compile(r"名字|我是|我今年|岁|生日|住在|老家|工作|上班|职业|学生|毕业|"
                                  r"\bmy name\b|\bi am a\b|\bi'm a\b|\bi live\b|\bi work\b|\bbirthday\b|\byears old\b", re.I)),
    (Category.PREFERENCE, re.compile(r"喜欢|爱吃|爱喝|爱看|讨厌|不喜欢|最爱|偏爱|受不了|"
                                     r"\blike\b|\blove\b|\bhate\b|\bfavou?rite\b|\bprefer\b|\benjoy\b", re.I)),
    (Category.RELATIONSHIP, re.compile(r"妈妈|爸爸|父母|老婆|老公|女朋友|男朋友|对象|孩子|儿子|女儿|哥哥|姐姐|弟弟|妹妹|朋友|同事|"
                                       r"猫|狗|宠物|\bmom\b|\bdad\b|\bwife\b|\bhusband\b|\bgirlfriend\b|\bboyfriend\b|"
                                       r"\bkids?\b|\bson\b|\bdaughter\b|\bfriend\b|\bcats?\b|\bkittens?\b|\bdogs?\b|\bpupp(?:y|ies)\b|\bpets?\b", re.I)),
    # recurring expressions: a routine, never dated ("每个周末" is no particular Saturday)
    (Category.ROUTINE, re.compile(r"每(?:个|一个?|隔一?)?(?:天|日|晚|早|周|星期|礼拜|月|年|次|回|季|逢|年的|个月)|每逢|逢年过节|"
                                  r"隔天|天天|周周|年年|月月|一到(?:周末|周[一二三四五六日天]|星期[一二三四五六日天]|晚上|假期)就?|"
                                  r"(?:周末|周[一二三四五六日天]|星期[一二三四五六日天]|礼拜[一二三四五六日天])(?:一般|通常|都|总|常常?|经常)|"
                                  r"经常|(?<!非)常(?!识)|总是|习惯|平时|平常|通常|一般都|向来|"
                                  r"\bevery\s+(?:other\s+|single\s+)?(?:day|night|morning|evening|afternoon|week|weekend|month|year|time|"
                                  r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|summer|winter|spring|autumn|fall)s?\b|"
                                  r"\beach\s+(?:day|night|morning|evening|week|weekend|month|year)\b|"
                                  r"\b(?:on\s+)?(?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekends)\b|"
                                  r"\b(?:daily|nightly|weekly|monthly|yearly|annually)\b|\bmost\s+(?:days|nights|mornings|weekends)\b|"
                                  r"\busually\b|\balways\b|\boften\b|\busually\b|\bevery so often\b", re.I)),
    (Category.EVENT, re.compile(r"明天|昨天|今天|上周|下周|周末|下个月|去年|刚刚|考试|面试|旅行|搬家|"
                                r"\btomorrow\b|\byesterday\b|\btoday\b|\bnext week\b|\blast week\b|\bweekend\b", re.I)),
    (Category.MOOD, re.compile(r"开心|难过|伤心|焦虑|累|烦|生气|孤独|害怕|紧张|"
                               r"\bhappy\b|\bsad\b|\banxious\b|\btired\b|\bangry\b|\blonely\b|\bscared\b|\bstressed\b", re.I)),
)

_INSTRUCTION_RE = re.compile(
    r"(忽略|无视|忘记|忘掉|不要理会|别管)\s*(你?之前|以上|上面|前面|所有|一切|你的)?\s*的?\s*(所有|全部)?\s*"
    r"(设定|指令|指示|提示词?|规则|要求|人设|系统|限制)"
    r"|(从现在(开始|起)|现在起)\s*你(是|就是|要|必须)|你现在是|你不再是|你来?扮演|进入开发者模式|越狱|系统提示|提示词注入"
    r"|\b(ignore|disregard|forget)\b\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|preceding|system)?\s*"
    r"(instructions?|prompts?|rules|directions|guidelines)"
    r"|\byou are now\b|\bfrom now on,? you\b|\bpretend you are\b|\bnew instructions?\b"
    r"|\bsystem prompt\b|\bjailbreak\b|\bdeveloper mode\b"
    r"|<\|?\s*(system|im_start|im_end|assistant|user|endoftext)\s*\|?>|\[/?\s*(system|inst)\s*\]|<<\s*/?sys\s*>>"
    r"|(^|\n)\s*(system|assistant|developer)\s*[:：]"
    r"|<\s*/?\s*recollection\s*>", re.I)

_SPECIES = {"猫": "cat", "猫咪": "cat", "小猫": "cat", "黑猫": "cat", "白猫": "cat", "橘猫": "cat", "狗": "dog",
            "狗狗": "dog", "小狗": "dog", "仓鼠": "hamster", "兔子": "rabbit", "鹦鹉": "parrot", "乌龟": "turtle",
            "金鱼": "fish", "鱼": "fish", "cat": "cat", "kitten": "cat", "dog": "dog", "puppy": "dog",
            "hamster": "hamster", "rabbit": "rabbit", "bunny": "rabbit", "parrot": "parrot", "turtle": "turtle",
            "fish": "fish"}

_ZH_RELATIONS = ("前女友|前男友|女朋友|男朋友|老婆|老公|妻子|丈夫|妈妈|母亲|爸爸|父亲|哥哥|姐姐|弟弟|妹妹|"
                 "好朋友|朋友|闺蜜|同事|老板|室友|同学|对象|儿子|女儿")

_NOT_A_NAME_ZH = re.compile(r"^(?:" + "|".join(sorted(set(_ZH_RELATIONS.split("|")) | {
    "爸", "妈", "爷爷", "奶奶", "外公", "外婆", "姥姥", "姥爷", "叔叔", "阿姨", "舅舅", "姑姑", "老师", "医生", "师傅",
    "大家", "别人", "人家", "外卖", "车", "醒", "起", "救护车", "警察", "快递"}, key=len, reverse=True)) + ")")

def guess_category(sentence: str) -> Category:
    """First matching keyword group, else OTHER."""
    for cat, pat in _CATEGORY_WORDS:
        if pat.search(sentence):
            return cat
    return Category.OTHER


def is_instruction_like(text: str) -> bool:
    """True when ``text`` tries to act as instructions to the model (jailbreak
    phrases in zh/en, fake role tags, recollection tags)."""
    return bool(_INSTRUCTION_RE.search(text or ""))


# -- the gateway's own words --------------------------------------------------------
# A client echoing the recollection, or a person pasting it or the persona prompt,
# must not teach the gateway its own output. Recognised: any [src:…] citation
# marker, the template's header and lines in every catalogue language (built from
# the catalogues, so they follow any change there), the model's memory lines
# "[ID] text (date, emotion)" and change lines "[ID] → [ID]", the prompt blocks'
# tags, and sentences of the
# prompts huiyi sends (memory.model_prompts) or of ``own_texts``.

_SRC_MARKER_RE = re.compile(r"[\[［【]\s*src\s*[:：]", re.I)
_MEMORY_LINE_RE = re.compile(r"^\s*[\[［]\s*[0-9a-z_-]{6,40}\s*[\]］]\s+.*[(（]\s*(?:\d{4}(?:-\d{2}){0,2}(?:~\d{4}-\d{2}-\d{2})?|\?)"
                             r"\s*[,，].*[)）]\s*$",
                             re.I)
_BLOCK_TAG_RE = re.compile(r"^\s*[<＜]\s*/?\s*(?:memories|changes|conversation|recollection|message)\s*[>＞]\s*$",
                           re.I)
_CHANGE_LINE_RE = re.compile(r"^\s*[\[［]\s*[0-9a-z_-]{6,40}\s*[\]］]\s*(?:→|->)\s*"
                             r"[\[［]\s*[0-9a-z_-]{6,40}\s*[\]］]\s*$", re.I)
_FORMAT_FIELD_RE = re.compile(r"\{[a-z_]+\}")
MIN_ECHO_CHARS = 10
"""Shortest normalised sentence (characters) matched against the gateway's prompt texts."""


@lru_cache(maxsize=1)
def _template_line_res() -> tuple[re.Pattern[str], ...]:
    from locales import LANGUAGES, translate

    out = []
    for lang in LANGUAGES:
        for msgid in ("What you remember about {name}:", '- {when}, {name} said: "{text}"',
                      '- {when}, {name} said: "{text}" (replying to {context})',
                      '- {name} earlier said "{older}" ({older_when}), later said "{newer}" ({newer_when})'):
            shape = translate(lang, msgid)
            pattern = re.escape(shape.lstrip("- "))
            for field_name, any_text in (("name", ".{1,64}?"), ("when", ".{1,40}?"), ("text", ".*"),
                                         ("older_when", ".{1,40}?"), ("newer_when", ".{1,40}?"), ("older", ".*"),
                                         ("newer", ".*"), ("context", ".*")):
                pattern = pattern.replace(re.escape("{" + field_name + "}"), any_text)
            out.append(re.compile(r"^\s*(?:[-*•·]\s*)?" + pattern + r"\s*$"))
    return tuple(out)


def _prompt_fragments(texts: Sequence[str]) -> list[str]:
    """Normalised sentences of prompt texts, their ``{fields}`` cut out."""
    out: list[str] = []
    for text in texts:
        for piece in _FORMAT_FIELD_RE.split(text or ""):
            for sent in split_sentences(piece, semicolons=True):
                norm = normalise(sent).strip(" -:：,，。.")
                if len(norm) >= MIN_ECHO_CHARS:
                    out.append(norm)
    return out


@lru_cache(maxsize=1)
def _gateway_fragments() -> tuple[str, ...]:
    from memory import model_prompts as mp

    texts = [*mp._RECOLLECTION_RULES.values(), *mp._RECONSTRUCTION_SYSTEM.values(),
             *mp._RECONSTRUCTION_USER.values(), mp.EXTRACTION_SYSTEM]
    return tuple(_prompt_fragments(texts))


def _is_echo(norm: str, fragments: Sequence[str]) -> bool:
    # a whole prompt sentence inside it, or a long piece of one (short ones could be
    # the prompts' own examples, "我养了一只叫煤球的黑猫", which people do say)
    if len(norm) < MIN_ECHO_CHARS:
        return False
    return any(frag in norm or (len(norm) >= 2 * MIN_ECHO_CHARS and norm in frag) for frag in fragments)


def _is_gateway_line(line: str) -> bool:
    """A whole line of the template (header, item), a model memory line or a block tag."""
    if _MEMORY_LINE_RE.match(line) or _BLOCK_TAG_RE.match(line) or _CHANGE_LINE_RE.match(line):
        return True
    simple = to_simplified(line)  # the catalogues are simplified Chinese
    return any(p.match(simple) for p in _template_line_res())


def is_gateway_text(sentence: str, own_texts: Sequence[str] = ()) -> bool:
    """True when ``sentence`` (one sentence or line) is a shape the gateway itself
    produces: a ``[src:…]`` marker, a template header or line (any catalogue
    language), a model memory line, a prompt block tag, or a sentence of huiyi's
    prompts or of ``own_texts`` (at least MIN_ECHO_CHARS normalised characters)."""
    if not sentence or not sentence.strip():
        return False
    gateway, norm = _gateway_reading(sentence)
    return gateway or (bool(own_texts) and _is_echo(norm, _own_fragments(tuple(own_texts))))


@lru_cache(maxsize=2048)  # a sentence asked again within its capture: 76.2% hits at 2k, 77.1% at 8k
def _gateway_reading(sentence: str) -> tuple[bool, str]:
    """``(is sentence a shape of huiyi's own, its normalised form for the echo
    test of own texts)``, kept: capture asks it of each sentence up to three times
    (the persona's echo, ``clean_text``, the speech act), and its patterns and
    normalisation were a twentieth of a capture's CPU beside the embedding."""
    if _SRC_MARKER_RE.search(sentence) or _is_gateway_line(sentence):
        return True, ""
    norm = normalise(sentence).strip(" -:：,，。.")
    return _is_echo(norm, _gateway_fragments()), norm


@lru_cache(maxsize=64)
def _own_fragments(own_texts: tuple[str, ...]) -> tuple[str, ...]:
    """``_prompt_fragments`` of a tenant's own texts, kept: capture checks every
    sentence of every message against the same persona."""
    return tuple(_prompt_fragments(own_texts))

_SPACE_RUN_RE = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_AFTER_CJK_SPACE_RE = re.compile(rf"(?<=[{_CJK}\u3000-\u303f\uff01-\uff0f\uff1a-\uff20]) ")
_BEFORE_CJK_SPACE_RE = re.compile(rf" (?=[{_CJK}\u3000-\u303f\uff01-\uff0f\uff1a-\uff20])")


def _slot_text(sentence: str) -> str:
    """What the slot patterns read: simplified Chinese (they are written in it),
    runs of spaces (also NBSP, ideographic space) as one, and no space next to a
    CJK character in a Chinese sentence (more CJK characters than Latin words):
    "我家猫叫 Apple123" reads as "我家猫叫Apple123", the usual CJK–Latin spacing
    is no part of a value. An English sentence keeps its spaces before CJK
    ("I live in 上海")."""
    text = _SPACE_RUN_RE.sub(" ", to_simplified(sentence)).strip()
    text = _AFTER_CJK_SPACE_RE.sub("", text)
    if len(re.findall(rf"[{_CJK}]", text)) > len(re.findall(r"[A-Za-z]+", text)):  # a Chinese sentence
        text = _BEFORE_CJK_SPACE_RE.sub("", text)
    return text


# -- chit-chat: the words that name no topic, and the one test of a line that names none --

# Words that say a question is about something, not what about: remembering, telling (「我们聊了哪些话题」),
# a vague time.
_GENERIC_WORDS = frozenset(
    "记得 还记得 知道 觉得 怎么样 怎么 后来 然后 接着 最近 那天 那次 那时 那时候 当时 之前 以前 上次 刚才 说过 聊过 提过 "
    "告诉 以后 现在 真的 一下 那个 这个 那些 这些 那里 这里 那家 那边 哪个 是不是 有没有 还是 "
    "曾经 聊 聊聊 聊过 谈过 话题 具体 哪些 "
    "rememb know think tell told say said talk mention happen again realli still recent ago last time thing do did go "
    "what when where who how whi which".split())
# Words of everyday chat that name no topic, beyond _GENERIC_WORDS: hedges, modal verbs, vague times.
_CHAT_WORDS = frozenset(
    "就是 确实 其实 真的 还是 可以 已经 一下 一起 一直 一样 这样 那样 这么 那么 打算 觉得 感觉 好像 应该 可能 需要 "
    "希望 还有 没有 不是 不会 不要 不过 而且 今天 明天 昨天 今晚 现在 时候 刚刚 马上 终于 有点 有些 一点 特别 非常 "
    "比较 好多 很多 太多 东西 事情 我要 你要 我们 大家 别人 怎么办 为啥 干嘛 啥时候 当然 最好 回来 回去 出来 出去 进来 "
    "过来 起来 下来 "
    "just realli actual basic total liter serious honest definit probabl mayb kind sort pretti quit "
    "someth anyth everyth noth thing stuff way lot bit day today tonight tomorrow yesterday now late earlier soon "
    "get got make made want need like know think feel look seem come back right".split())
# Single CJK characters that name no topic when jieba cuts one alone (「我要认真看」's 「看」, 「2张」's 「张」).
_CHAT_CHARS = frozenset(
    "一二两几个张次些点下上里中前后多少大小好坏真太挺最更很还再又也都就才只已要想会能可得该去来说看听做用让给跟同"
    "把被向从往是有没无不别啥谁哪怎么嘛呐哎诶唉嘿哼喂耶嗷噗咦哇呜嗨哟喽咯呗今明昨天年月日号时分早晚刚正快慢行对错"
    "事样种回儿人吃玩问发带成地读走飞起站夸却硬怪俩掉超痛煮拿放买卖送找等叫穿住坐跑打开关写学教懂忘记信算像够差完")
# Reactions, moods and greetings: a line of nothing else is chit-chat (「笑死」「困死了」「绝了」, "same", "so tired").
REACTION_WORDS = frozenset(
    "笑死 笑 死 绝 困死 累死 饿死 热死 冷死 烦死 气死 无语 绝了 牛 牛逼 厉害 卧槽 我去 天哪 天啊 好棒 可爱 好吧 晚安 早安 "
    "早上好 晚上好 下午好 你好 嗨 在吗 是吗 是啊 对啊 对呀 假的 同意 同感 我也是 加油 辛苦 恭喜 哇塞 好玩 有趣 搞笑 "
    "好笑 尴尬 郁闷 开心 高兴 难过 伤心 无聊 困 累 饿 烦 冷 热 好冷 好热 好累 好困 好饿 好烦 心情 不错 还行 一般 好听 "
    "好看 好吃 有意思".split())
_REACTION_EN = ("same wild crazy random hilarious funny nice cool wow omg true whatever morning night evening good great "
                "awesome amazing sure guess bored tired sleepy hungry ugh yay cute sad happy excited fun weird "
                "interesting agree exactly right wrong fine hey hello bye see later soon cold hot weather busy "
                "glad sorry love hate tell joke gonna wanna gotta").split()


@lru_cache(maxsize=512)  # a turn asks it of the same line up to five times (channels, decision, chit-chat)
def content_terms(line: str) -> frozenset[str]:
    """The tokens of ``line`` (``memory.text.tokens``) that name a topic: a jieba
    word of two or more characters, a Latin word or a number of two or more
    digits that is not laughter or an acknowledgement (``is_filler``), not a word
    of remembering, telling, a vague time or a question (``_GENERIC_WORDS``) and
    not a hedge or modal of everyday chat; a single CJK character only where
    jieba cut it as a word of its own and it is no function character (「猫」 in
    「我的猫呢」, 「花」 in 「甭管啥花」 — not 「看」 in 「我要认真看」, nor 「天」 of
    「今天」). What a BM25 hit must hold (``memory.recall.RecallParams.standout``) and what
    ``is_chitchat`` reads."""
    alone = {w for w in words(line) if len(w) == 1 and is_cjk(w)}
    out: set[str] = set()
    for t in tokens(line):
        if is_filler(t) or t in _GENERIC_WORDS or t in _CHAT_WORDS:
            continue
        if len(t) == 1 and is_cjk(t):
            if t in alone and t not in _CHAT_CHARS:
                out.add(t)
        elif t.isdigit():
            if len(t) >= 2:
                out.add(t)
        elif any(unicodedata.category(c)[0] in "LN" for c in t):
            out.add(t)
    return frozenset(out)


def names_nothing(line: str) -> bool:
    """True when ``line`` has no content term (``content_terms``) beyond
    reaction, mood and greeting words (``REACTION_WORDS``; 「哈哈」「笑死」「困死了」
    「好冷啊」「我今天好累」, "lol", "same", "I'm so bored"): the word test of the
    one chit-chat decision, ``memory.speech_act.is_chitchat``, which recall and
    capture both read."""
    return not (content_terms(line) - REACTION_WORDS - reaction_stems())


# Taking up what the companion said: thanks, agreement, advice taken, trust and praise for the listener
# (「谢谢你的建议，我会试试的」「你说得对」, "I really appreciate it", "I absolutely believe you"). A sentence that
# names nothing beyond these, reactions and moods tells nothing of the speaker (``uptake_only``).
UPTAKE_WORDS = frozenset(
    "谢谢 感谢 非常感谢 十分感谢 多谢 谢 感恩 我会 会的 建议 意见 方法 办法 解答 回答 答案 帮助 帮忙 分享 鼓励 支持 提醒 指点 指导 注意 尝试 试试 试试看 "
    "试 努力 考虑 参考 记住 收到 明白 理解 懂 同意 赞同 认同 说得对 说得好 说的对 有道理 道理 听起来 一定 好的 去做 认真 照做 "
    "按照 你说 所说 提到 提议 主意 想法 看法 观点 启发 受益 受益匪浅 朋友 伴侣 鼓舞 安慰 关心 陪伴 陪 耐心 相信 信任 照 试看 "
    "完全同意 非常同意".split())
_UPTAKE_EN = ("thank thanks appreciate appreciated advice suggestion suggestions tip tips help helping support "
              "encouragement encouraging kind words word agree believe try trying keep point impressed sure "
              "definitely totally absolutely welcome idea ideas insight perspective input "
              "share sharing buddy much lot method methods give take trust listen listening always "
              "sound sounds").split()


_UPTAKE_FOR_RE = re.compile(r"\bfor (?:caring|your (?:care|concern|kindness|patience|time)|being (?:there|so kind|so patient)|"
                            r"listening|understanding|(?:chatting|talking) with me)\b|"
                            r"听我(?:说|讲|倾诉|唠叨|吐槽)(?:这些|了?这么多|完)?|陪我(?:聊天|聊|说话|说说话)", re.I)
"""What a thanks is for when it is the listener's own doing ("Thank you for caring.", "Thanks
for understanding me", 「谢谢你听我说这些」, 「谢谢你陪我聊天」), read out of the line before its
terms: "care" alone is no uptake word ("taking care of my dog" is LoCoMo evidence), "Thanks for
caring for my cat" keeps its cat, and 「我妈妈每天陪我聊天」 its mother."""

_DEGREE_EN = ("completely entirely fully wholeheartedly 100% hundred percent").split()
"""How much one agrees ("I agree with you 100%."): neither content nor uptake on its own."""
_DEGREE_ZH = frozenset("完全 百分 百分之 百分之百 绝对 非常 十分".split())
"""How much one agrees in Chinese (「我百分之百同意你」「我完全同意你说的」), as jieba's search-mode terms hold it."""

_SAME_VIEW_RE = re.compile(
    r"(?:(?:哈+|对+[呀啊的]?|是[呀啊的]|嗯+|haha+|yeah|yes|oh|ok)[,，!！~～ ]*)*"
    r"(?:我也(?:是)?(?:这么|这样)(?:觉得|想|认为)的?|我也(?:觉得|认为)(?:是)?(?:这样|的)|我也有同感|"
    r"(?:i )?(?:think|thought) so too|(?:i )?feel the same(?: way)?|(?:i )?agree(?: with you)?|me too|same here)"
    r"(?:[,，.!。！~～ ]*(?:哈+|haha+|lol))*[.!。！~～]*",
    re.I)
"""Agreement that names no word of its own (「我也这么觉得」, "I think so too", "I agree with you"),
after an acknowledgement or before laughter (「对呀，我也这样想」, "Haha I think so too")."""


_WHEN_RE = re.compile(r"今天|今晚|明天|后天|周末|下周|下个?月|明年|\b(?:today|tonight|tomorrow|weekend|next (?:week|month|year))\b",
                      re.I)


@lru_cache(maxsize=1)
def uptake_terms() -> frozenset[str]:
    """``UPTAKE_WORDS`` and ``_UPTAKE_EN`` as ``memory.text.tokens`` stems them."""
    return UPTAKE_WORDS | frozenset(stem(w) for w in _UPTAKE_EN)


@lru_cache(maxsize=1)
def _degree_terms() -> frozenset[str]:
    """``_DEGREE_EN`` as ``memory.text.tokens`` stems them, and ``_DEGREE_ZH``."""
    return frozenset(stem(w) for w in _DEGREE_EN) | _DEGREE_ZH


def _beyond_uptake(line: str) -> frozenset[str] | None:
    """The content terms of ``line`` beyond its words of uptake and of degree, once
    what a thanks is for (``_UPTAKE_FOR_RE``) is read out; None when the line takes
    nothing up (no uptake word, no such thanks) or names a day (``_WHEN_RE``: "I'm
    going to try making it tonight!" is a plan)."""
    rest = _UPTAKE_FOR_RE.sub(" ", line)
    terms = content_terms(rest)
    if not (terms & uptake_terms() or rest != line) or _WHEN_RE.search(line):
        return None
    return terms - uptake_terms() - _degree_terms()


def uptake_alone(line: str) -> bool:
    """True when ``line`` is agreement or thanks and nothing else, not even a mood:
    each of its content terms a word of uptake or of degree, at least one of
    uptake (``uptake_only``'s words; "I agree with you.", 「我同意」, 「我完全同意你说的」,
    "Thanks for caring."), or agreement naming no word at all (``_SAME_VIEW_RE``:
    「我也这么觉得」, "I think so too"). The speech-act stage reads it before a passing
    mood, which a sentence naming nothing else would otherwise be kept as."""
    return bool(_SAME_VIEW_RE.fullmatch(line.strip().rstrip(",，"))) or _beyond_uptake(line) == frozenset()


def uptake_only(line: str) -> bool:
    """True when ``line`` takes up what the companion said and names nothing
    else: it holds a word of thanks, agreement, advice taken or trust in the
    listener (``UPTAKE_WORDS``, "appreciate", "agree", "try" …) and no content
    term (``content_terms``) beyond those, reactions and moods
    (「谢谢你的建议，我会试试的」, "I really appreciate it", "I totally agree", "I agree
    with you 100%", "Thank you for caring": what a thanks is for when it is the
    listener's doing, ``_UPTAKE_FOR_RE``, and how much one agrees, ``_DEGREE_EN``, name
    nothing either; not 「我会试着每天早起跑步」, whose 早起 and 跑步 are the speaker's,
    nor a plan for a day named, "I'm going to try making it tonight!")."""
    beyond = _beyond_uptake(line)
    return beyond is not None and not (beyond - REACTION_WORDS - reaction_stems())


@lru_cache(maxsize=1)
def reaction_stems() -> frozenset[str]:
    """``_REACTION_EN`` as ``memory.text.tokens`` stems them."""
    return frozenset(stem(w) for w in _REACTION_EN)
