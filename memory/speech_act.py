"""Speech acts: what each sentence of a person's message does, read before any extraction.

``read(sentence, addressed=…) -> Reading`` classifies one sentence (as
``memory.text.split_sentences`` cuts a message) into one ``Act``:

- ``self``: a statement about the speaker (first person, or — said to the bot —
  without another subject: 「周五生日」, "finally climbed Mount Fuji 🗻 took us 7
  hours"); what the speaker says about their own people is theirs (DESIGN rule
  5: 「我妈说她下个月退休」);
- ``other``: about someone or something else: hearsay (「听说…」, "apparently"),
  another person's opinion (「我同事说猫比狗聪明，笑死」, "My coworker thinks
  remote work makes people lazy, lol"), another subject (「电影很好看」);
- ``question``: wh, yes/no, A-not-A, a tag question that checks a fact
  (对吗 / 对吧 / 是吧 / 没错吧 / 你还记得吗 / right? / do I? / isn't it?), a
  recall check ("did I tell you…", 「我之前跟你说过…吗」, 「我曾经和你推荐过…」), and a
  quiz about the speaker's own fact beside its premise (「我最近去厦门旅游了，厦门我
  最喜欢的景点是？」, 「你给我推荐了一个海滨城市，它是？」: nothing told);
  a rhetorical question that carries a statement (「我对花生过敏你知道吗！！」) is
  read as that statement (``self``, ``told`` the statement), and a statement
  beside a question to the companion (「我在学尤克里里，你会弹什么乐器吗？」) keeps
  it in ``told``;
- ``request``: asking the companion to do something (「给我讲个笑话吧」, "Write
  me a haiku"), or a slash command;
- ``reaction``: greetings, acknowledgements, laughter, chit-chat (「嗯，我知道了。」,
  「笑死」, "lol", "same", the weather) — a sentence that names nothing beyond
  reactions and moods (``memory.lexicon.names_nothing``); ``is_chitchat`` is
  the one chit-chat decision over it, which recall reads too; the speaker's own passing mood (「我今天好累」, "I'm so bored") is
  a reaction with ``why`` "mood" whose ``told`` capture keeps as a passing mood
  (``Category.MOOD``, lapsing in recall after ``memory.recall.MOOD_TTL_DAYS``);
  so is taking up the companion's words — thanks, agreement, advice taken, trust
  in the listener — with nothing of the speaker's own beside them (``why``
  "uptake": 「谢谢你的建议，我会尝试一下。」, "I really appreciate it, Jon!";
  ``memory.lexicon.uptake_only``), which capture does not keep;
- ``correction``: a self-correction (「啊说错了，不是上海，是南京」, "I meant
  Nanjing, not Shanghai"), with what was said wrongly and what is right;
- ``quote``: a quote or lyric (♪, 歌词：, a line wholly in quotes) and the
  gateway's own words (``memory.lexicon.is_gateway_text``);
- ``unknown``: the stage could not classify it (it raised): capture keeps its
  former behaviour for the sentence, and the sentence's shape — never its text —
  is logged at debug.

Only ``self`` and ``correction`` (and the ``told`` part of a question) may
write; ``memory.capture`` reads this answer for extraction, supersession and
conflicts, for the offline extractor and the model's alike. Pure, offline;
measured on ``tests/data/speech_acts.tsv`` (``python -m bench speechact``).
"""

from __future__ import annotations

import enum
import logging
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from memory.lexicon import (_NOT_A_NAME_ZH, _SPECIES, REACTION_WORDS, _slot_text, guess_category, is_gateway_text,
                            is_instruction_like, names_nothing, uptake_alone, uptake_only)
from memory.text import to_simplified
from memory.types import Category

__all__ = ["Act", "Reading", "WRITES", "read", "is_chitchat", "shape", "is_question", "is_request", "is_speaker_statement",
           "told_beside_question", "told_text", "clauses", "is_claim", "asks_the_person", "answers", "unaddressed",
           "MIN_CHARS"]

log = logging.getLogger(__name__)

MIN_CHARS = 2
"""Shortest sentence (characters, stripped) that can be a statement."""


class Act(str, enum.Enum):
    """What a sentence does (module docstring)."""

    SELF = "self"
    OTHER = "other"
    QUESTION = "question"
    REQUEST = "request"
    REACTION = "reaction"
    CORRECTION = "correction"
    QUOTE = "quote"
    UNKNOWN = "unknown"


WRITES = frozenset({Act.SELF, Act.CORRECTION})
"""Acts whose sentence capture may store (a question stores only its ``told``)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One sentence's speech act: ``act``; ``told`` the statement capture may
    write ("" for none: the sentence itself for ``self``, the statement a
    rhetorical question carries or that stands beside a question to the
    companion); ``why`` a short sub-kind for logs and the labelled set (``tag``,
    ``recall``, ``rhetorical``, ``beside``, ``hearsay``, ``opinion``, ``ack`` …);
    for a correction, ``wrong`` (what was said wrongly, "" when not named) and
    ``right`` (what is right, "" when not named)."""

    act: Act
    told: str = ""
    why: str = ""
    wrong: str = ""
    right: str = ""

    @property
    def writes(self) -> bool:
        """True when capture may store something of the sentence."""
        return self.act in WRITES or bool(self.told)


_FIRST_ZH = re.compile(r"我|咱|本人|俺")
# "we" as a subject, said to the companion, is the speaker with their own ("we're expecting twins"), as 我们
# is; "our"/"us" alone is not ("Chasing our dreams …" is a saying, not a deed)
_FIRST_EN = re.compile(r"\b(i|i'm|i've|i'd|i'll|im|my|me|mine|myself|we|we're|we've|we'll|we'd)\b", re.IGNORECASE)
_QUESTION_RE = re.compile(r"([?？]\s*$)|([吗么]\s*[。!！~～]*\s*$)")
# a sentence-final 呢 asks only after a short "what about X" (你呢, 那你呢, 然后呢, 小美呢); after
# anything else it is an exclamation (结尾太好哭了呢, 好累呢) — or the question word already asks
_WHAT_ABOUT_RE = re.compile(r"^(?:那|那么|所以|还有)?(?P<x>[\u4e00-\u9fffA-Za-z]{1,4})呢\s*[。!！~～]*\s*$")
_WHAT_ABOUT_WORDS = frozenset("你 您 他 她 它 你们 他们 她们 大家 别人 然后 后来 接下来 之后 明天 今天 其他 别的 这个 那个 "
                              "这些 那些 这里 那里 这儿 那儿".split())
# an indirect question inside a statement tells how the person is (不知道该怎么跟他沟通, 在纠结要不要辞职,
# 忘了把护照放哪儿了, "I don't know how to"): its question word asks nothing
_INDIRECT_ZH = re.compile(r"(?:不知道|不清楚|不明白|搞不懂|想不通|想不明白|不确定|不晓得|不懂|弄不清楚?|说不清楚?|拿不准|"
                          r"拿不定主意|没想好|还没想好|想知道|纠结|犹豫|考虑|在想|没决定|还没决定|决定不了|定不下来|忘了|忘记|"
                          r"记不清|想不起来?)(?:[^，,。！!？?；;]*)")
_TRAILING_SYMBOLS_RE = re.compile(r"[\s\u200d\ufe0f\U0001f3fb-\U0001f3ff\u2600-\u27bf\U0001f000-\U0001faff]+$")
# a question word asking (not 「什么都吃」「谁都知道」「哪里都想去」「没什么」「不怎么」「多少有点」,
# nor the complaints 「怎么又…」「为什么这么…」, which tell how the person is)
_ASKING_ZH = re.compile(
    r"(?<![不没])(?>谁|哪(?!有)(?:里|儿|天|个|些|年|家|位|种|次|边)?|什么(?:时候)?|啥(?:时候)?|为什么|为啥|怎么(?:样|办)?|怎样|"
    r"几(?:点|岁|号|月)|多大|多久|多远|多少(?!有点|有些|会|也|都))(?![都也又这那])|来着|是否|干(?:嘛|啥|吗)|"
    r"([\u4e00-\u9fff])[不没]\1")  # A-not-A: 是不是, 有没有, 喜不喜欢
_AUX_EN = r"(?:do|does|did|can|could|will|would|should|is|are|am|was|were|have|has|had)"
_ASKING_EN = re.compile(  # not "When I was young, …", "What a day", "How nice", "Remember that I moved"
    rf"^\s*(?:(?:what|when|where|who|whom|whose|why|how|which)(?:\s+{_AUX_EN}\b|['’]?s\b|\s+many\b|\s+much\b|"
    rf"\s+old\b|\s+long\b)|{_AUX_EN}\s+(?:you|i|we|he|she|they|it|my|your)\b|"
    rf"(?:tell|remind|show)\s+me\b|remember\s+(?:what|when|where|who|how|which)\b)", re.IGNORECASE)


def is_question(plain: str) -> bool:
    """True when ``plain`` (one sentence, simplified) asks rather than tells:
    a question mark or a sentence-final 吗/呢 — or, since people in chat often
    leave the mark out, a question word that asks (「我生日是哪天」「我是谁」
    「我喜欢什么运动」「我住哪来着」; not 「我什么都吃」「我没什么爱好」
    「我不怎么吃辣」) or an English sentence opening with a wh-word and an
    auxiliary or with an inverted auxiliary ("where do I live", "what's my
    cat's name", "do you remember my cat"; not "When I was young, …").
    Sentence-final 呢 asks only in a short "what about X" (你呢, 那你呢, 然后呢);
    after anything else it is an exclamation (「结尾太好哭了呢」), and 嘛/吧/啊
    never ask by themselves. A question word inside an indirect question
    (「不知道该怎么跟他沟通」, 不清楚/想不通/不确定…) asks nothing, nor does
    the rhetorical 哪有 (「哪有，我才没生气」: "no way")."""
    plain = _TRAILING_SYMBOLS_RE.sub("", plain)  # 「我能养猫吗🥺」: the emoji after it hides no question
    if _QUESTION_RE.search(plain) or _ASKING_EN.match(plain) or _asks_what_about(plain):
        return True
    return bool(_ASKING_ZH.search(_INDIRECT_ZH.sub("", plain)))


def _asks_what_about(plain: str) -> bool:
    """「你呢」「那你呢」「小美呢」「明天呢」: a short X呢 whose X is a pronoun, a name,
    a noun or a time (jieba's tags), not a feeling (「好累呢」)."""
    m = _WHAT_ABOUT_RE.match(plain.strip())
    if m is None:
        return False
    x = m["x"]
    if x in _WHAT_ABOUT_WORDS:
        return True
    tags = [f for _w, f in _posseg(x)]
    return tags[-1].startswith(("n", "r", "t")) and all(f.startswith(("n", "r", "t", "uj")) for f in tags)


# -- statements without a subject (private chats, or the bot addressed) ---------
# Chinese drops the subject all the time: to the bot, "周五生日" or "上周用 docker
# 部署了个人博客" is about the speaker. Not so a question, a greeting, small talk
# ("今天天气不错", "挺好的", "知道了"), a remark to the bot ("你真好") or a
# sentence with another subject ("小美周五生日", "电影很好看", "It rains").

_SMALL_TALK_ZH = re.compile(
    r"^(?:(?:你好|您好|早上好|早安|中午好|午安|下午好|晚上好|晚安|哈喽|嗨|嘿|哈+|嘿+|呵+|嘻+|嗯+|哦+|噢+|喔+|啊+|诶|欸|"
    r"好的?|好吧|好嘞|行吧?|可以|对|对啊|是啊|是的|没错|确实|真的|收到|了解|明白了?|懂了|知道了|谢谢|多谢|感谢|不客气|"
    r"没事|没关系|没问题|拜拜|再见|回头见|晚点聊|加油|辛苦了|厉害|牛|绝了|笑死|晚安啦|早|在吗|在不在|OK|ok|好滴|不错|挺好|还行|还好|太好了|好久不见|久违了|睡啦|睡了|先睡了|去睡了|撤了|先撤了|下线了|溜了|闪了|我先睡了)"
    r"[啊呀啦哦吧嘛哈呢~～!！。.，,、\s]*)+$")
_WEATHER_ZH = re.compile(r"天气|下.{0,4}[雨雪]|刮.{0,3}风|好热|好冷|太热|太冷|热死|冷死|晴天|阴天|雾霾|气温|降温|升温")
# person, pronoun, place or organisation names as the first content word: another subject
_OTHER_SUBJECT_FLAGS = ("r", "nr", "nrfg", "nrt", "ns", "nt", "nz")
_LEADING_FLAGS = ("t", "tg", "f", "d", "zg", "c", "y", "e", "o", "x", "m", "mq", "uj", "ul", "b")
_SPEAKER_HEAD_FLAGS = ("v", "vd", "vn", "vg", "a", "ad", "an", "ag", "p", "i", "l")
_DISCOURSE_ZH = re.compile(r"^(?:对了|话说|其实|我说真的|说真的|我跟你说|跟你说|我告诉你|顺便说一下|顺便|另外|还有|然后|所以|不过|"
                           r"哎|唉|诶|嗯)[啊呀吧]?[，,、\s]*")
_LEADING_DATE_ZH = re.compile(r"^(?:这|本|下下?|上上?)个?(?:周末|周[一二三四五六日天]|星期[一二三四五六日天]|礼拜[一二三四五六日天]|"
                              r"周|星期|礼拜|月|学期|季度)")
_PERSONAL_NOUNS_ZH = re.compile(r"生日|考试|面试|婚礼|手术|体检|航班|约会|毕业|入职|离职|出差|搬家|旅行|旅游|加班|上班|下班|"
                                r"放假|休假|请假|感冒|发烧|生病|住院|失眠|减肥|健身|纪念日|答辩|考研|高考|驾照|"
                                r"心情|压力|身体|膝盖|头疼|头痛|肚子|胃|腰|嗓子|喉咙|牙|眼睛|失恋|分手|工资|年终奖")
_NOT_SPEAKER_EN = frozenset((
    "you your yours he she it they we him her them his its their this that these those there here what who which "
    "the a an my our hi hello hey thanks thank thx ty good morning night evening afternoon lol lmao haha hahaha ok okay "
    "sure yes yeah yep nope no nice cool great awesome bye see sounds welcome np hmm hm oh wow omg please sorry "
    "well maybe congrats congratulations agreed agree exactly indeed true totally definitely absolutely "
    "don't dont can't cant have let let's lets keep stay take enjoy be go").split())
# a gerund subject ("Taking care of ourselves is key"), a name or friend called at the end ("…, John!")
_GERUND_SUBJECT_EN = re.compile(r"\b(?:is|was|are|were|'s|will|would|can|could|must|should|might|may|makes|pays|helps|"
                                r"takes|gives|means|feels|seems|sounds|looks|has|have|had|made)\b", re.I)
_PREPOSITIONS_EN = frozenset("to for in at on with from about by into onto over under after before during until "
                             "till since through".split())
_SMALL_TALK_EN = re.compile(r"^\s*(?:got it|sounds? (?:good|great|fun)|looking forward|see you|take care|good luck|no worries|"
                            r"no problem|my pleasure|just like|totally|so true|same here|fair enough|will do)\b", re.I)
_VOCATIVE_EN = re.compile(r",\s*(?:[A-Z][a-z]+|buddy|dude|mate|man|bro|girl|guys|friend)\s*[!.?~]*\s*$")
_LEADING_EN = frozenset((
    "just finally also still really so totally actually recently lately today yesterday tonight tomorrow btw anyway "
    "anyways again already then now last next this soon currently yay woohoo hooray ugh phew whew welp argh yass "
    "kinda sorta super pretty very quite bit a").split())
# how the speaker is, said without "I'm": "Nervous af, …", "Kinda homesick", "Happy but sleepy"
_STATE_EN = frozenset((
    "nervous anxious happy sad sleepy homesick excited sick hungry bored lonely busy broke sore stuck proud scared "
    "worried upset glad angry grumpy exhausted stressed tired jetlagged hungover sleepless restless heartbroken "
    "thrilled ecstatic miserable gutted knackered").split())
_SPEAKER_VERBS_EN = frozenset((
    "went got had made took saw met bought lost found quit left began started came ran won ate drank wrote read built "
    "sold spent felt slept broke flew drove gave kept paid thought taught caught fell forgot moved adopted love loves "
    "loved hate hated like liked enjoy enjoyed prefer have need want miss missed live lived work worked study studied "
    "own owned off back birthday exam exams interview flight wedding surgery moving starting heading going working "
    "studying feeling learning leaving flying visiting getting having starting trying planning been gonna "
    "didn't didnt am").split())
_EN_NOT_VERB_ING = frozenset("thing something nothing anything everything morning evening king ring string spring "
                             "wedding building ceiling during exciting amazing interesting boring annoying relaxing "
                             "inspiring refreshing touching stunning surprising disappointing charming".split())


def _posseg(sentence: str) -> list[tuple[str, str]]:
    import jieba.posseg

    return [(w.word, w.flag) for w in jieba.posseg.cut(sentence)]


def _told_deed(tagged: list[tuple[str, str]]) -> bool:
    """True when a subject-less Chinese statement (jieba's ``(word, flag)``) tells
    something that happened or is planned: a time word (「昨天跑了十公里」「下周三
    面试」), what the speaker is doing these days (「最近在学吉他」), or a verb done
    with 了/过 (「做成了蛋糕」「部署了个人博客」, 「过了！」 answering how an exam went).
    A bare verb phrase or judgement of the moment (「低调的」「养鳄鱼」「也许待
    也许不带」「大概还包邮哦」「没有呢还在纠结」) tells nothing a friend keeps."""
    if any(f in ("t", "tg", "m") or w in ("最近", "一直", "正在") for w, f in tagged):
        return True  # a time, a figure (「八十七分」) or what the speaker is doing these days (「最近在学吉他」)
    return any(w in ("了", "过") and f in ("ul", "uguo", "ug") and i > 0 and tagged[i - 1][1].startswith("v")
               and tagged[i - 1][0] not in REACTION_WORDS for i, (w, f) in enumerate(tagged))  # not 「太好笑了」


def _subjectless_about_speaker(plain: str) -> bool:
    """True when ``plain`` (simplified, no first-person word) is a declarative
    statement with no other subject, so that — said to the bot — it is about the
    speaker: "周五生日", "上周用 docker 部署了个人博客", "Went hiking yesterday".
    False for questions, greetings, small talk (weather, acknowledgements), a
    remark to the bot (你/you) or another subject (he, 小美, 电影, It). A "we"/"us"
    counts in English only after the speaker's own past deed ("finally climbed
    Mount Fuji, took us 7 hours")."""
    text = plain.strip().rstrip("。.!！~～…").strip()
    if len(text) < 2 or is_question(plain) or is_instruction_like(text):
        return False
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    words = re.findall(r"[A-Za-z][A-Za-z'’]*", text)
    if cjk >= len(words):
        text = _DISCOURSE_ZH.sub("", text)
        if not text or _SMALL_TALK_ZH.match(text) or _WEATHER_ZH.search(text) or re.search(r"你|您|咱们|大家", text):
            return False
        if cjk < 3 and guess_category(text) is Category.OTHER:
            return False
        tagged = [(w, f) for w, f in _posseg(_LEADING_DATE_ZH.sub("", text)) if w.strip()]
        head = next(((w, f) for w, f in tagged if f not in _LEADING_FLAGS), None)
        personal = bool(_PERSONAL_NOUNS_ZH.search(text)) or "《" in text  # a work named: 「是一部叫做《摔跤吧！爸爸》的电影」
        if head is None:  # only time words and particles: "周五生日" (生日 is tagged as a time word)
            return personal
        word, flag = head
        if word in ("自己", "本人"):  # 「第一次自己做成了蛋糕」: oneself is the speaker
            flag = "v"
        if flag in _OTHER_SUBJECT_FLAGS or _NOT_A_NAME_ZH.match(word) or word in _SPECIES:
            return False
        if flag.startswith(_SPEAKER_HEAD_FLAGS) or personal:
            return personal or guess_category(text) is not Category.OTHER or _told_deed(tagged)
        return False
    if _SMALL_TALK_EN.match(text):
        return False
    lowered = [w.lower().replace("’", "'") for w in words]
    if any(w in ("you", "your", "yours", "u", "ur") for w in lowered) or _VOCATIVE_EN.search(text + "!"):
        return False  # said to someone
    rest = [w for w in lowered]
    while rest and rest[0] in _LEADING_EN:
        rest = rest[1:]
    if not rest or rest[0] in _NOT_SPEAKER_EN:
        return False
    head = rest[0]
    if any(w in ("we", "our", "ours", "us", "ourselves") for w in lowered) and \
            not (head in _SPEAKER_VERBS_EN and not head.endswith("ing") or len(head) > 4 and head.endswith("ed")):
        return False  # about a "we" ("Chasing our dreams …"), unless after the speaker's own deed ("climbed …, took us")
    if len(rest) > 1 and rest[1] == "and" and not head.endswith("ed"):
        return False  # "Love and acceptance …": a noun phrase is the subject
    phrase = []  # "Working out together is …": the gerund's phrase up to a preposition ("Going to Seoul in May")
    for w in rest[1:]:
        if w in _PREPOSITIONS_EN or w[:1].isdigit():
            break
        phrase.append(w)
    if head.endswith("ing") and _GERUND_SUBJECT_EN.search(" ".join(phrase)):
        return False  # "Working out together is a great way of bonding": a gerund is the subject
    return head in _SPEAKER_VERBS_EN or head in _STATE_EN or (len(head) > 4 and head.endswith("ed")) or \
        (len(head) > 5 and head.endswith("ing") and head not in _EN_NOT_VERB_ING)



# a request to the companion (「给我讲个笑话吧」「推荐几部好看的电影」"Write me a haiku"): what it asks for is no fact
_REQUEST_ZH = re.compile(r"^(?:好嘞|好的|好|行|嗯+)?(?:请|麻烦|能不能|可不可以|可以)?(?:你)?(?:给我|帮我|替我|陪我|教我|告诉我|"
                         r"(?:帮我)?(?:告诉|转告)(?![你您我])|提醒我|推荐|讲个|讲一个|说个|"
                         r"说一个|来个|来一个|来首|来一首|写一|写个|画一|画个|唱一|唱个|唱首|翻译|解释一下)")
_DONE_ZH = re.compile(r"[了过]")
_REQUEST_EN = re.compile(r"^\s*(?:please\s+)?(?:write|give|tell|show|send|make|draw|sing|recommend|suggest|explain|"
                         r"translate|help|remind|teach|describe|list|name|find|pick|generate|compose)\b(?!\s+(?:me\s+)?"
                         r"(?:up|out)\b)", re.I)
# hearsay: what the speaker heard (「听说周杰伦又要开演唱会了」"Apparently it'll rain"), not what they are or did
_HEARSAY_RE = re.compile(r"^(?:听说|据说|听人说|听别人说|新闻说|网上说|有人说|传说|据报道|刷到|看到新闻说|看新闻说)|"
                         r"^\s*(?:i heard|heard|apparently|rumou?r has it|word is|they say|people say|"
                         r"(?:saw|read)\s+(?:on|in)\s+[^,.!?]{1,30}?\s+that)\b", re.I)


def is_request(plain: str) -> bool:
    """True when ``plain`` (one sentence, simplified) asks the companion to do
    something instead of telling about the speaker: 「给我讲个笑话吧」「帮我写一首诗」
    「推荐几部好看的电影」「陪我聊会儿天嘛」, "Write me a haiku", "Give me three
    ideas" — not a done deed (「帮我妈做了饭」, with 了/过)."""
    text = _DISCOURSE_ZH.sub("", plain.strip())
    if _REQUEST_ZH.match(text):
        return not _DONE_ZH.search(text)
    return bool(_REQUEST_EN.match(text))


def is_speaker_statement(sentence: str, addressed: bool) -> bool:
    """The filters every extracted fact passes, whichever extractor made it: a
    first-person statement (or, said to the bot, one without another subject),
    not a question, request, hearsay, greeting or small talk, not the gateway's
    own words. ``addressed``: said to the bot (a private chat, or a group
    message addressing it)."""
    plain = to_simplified(sentence)
    if len(sentence.strip()) < MIN_CHARS or sentence.lstrip().startswith("/") or is_question(plain):
        return False
    if is_request(plain):
        return False
    heard = _HEARSAY_RE.match(plain.strip())
    if heard:  # what they heard — unless it is about their own (听说我们部门要裁员)
        rest = plain.strip()[heard.end():]
        if not (_FIRST_ZH.search(rest) or _FIRST_EN.search(rest)):
            return False
    if _SMALL_TALK_ZH.match(_TRAILING_SYMBOLS_RE.sub("", plain.strip())) or is_gateway_text(sentence):
        return False
    if _FIRST_ZH.search(_DISCOURSE_ZH.sub("", plain.strip())) or _FIRST_EN.search(plain):
        return True
    return addressed and _subjectless_about_speaker(_slot_text(sentence))



# -- a statement beside a question to the companion ------------------------------
# 「我最近在学尤克里里，你会弹什么乐器吗？」, "Going to Chengdu next week, any food tips?": the
# ordinary shape of a chat line. The question asks the companion; the clause before it tells.

_CLAUSE_BREAK = frozenset("，,")
_OPENERS, _CLOSERS = "《「『“‘（([【", "》」』”’）)]】"
# what only leads into a question, or supposes instead of telling: no statement of its own
_NOT_TOLD_RE = re.compile(
    r"^\s*(?:如果|要是|假如|假设|万一|比如说?|我想问(?:一下|问|你)?|想问(?:一下|问|你)?|问一下|问你(?:个|一个)?(?:问题|事)?|请问|"
    r"我想知道|我很?好奇|好奇|说起来|对了|话说|顺便问一下|"
    r"if\b|what if\b|suppose\b|i (?:was |am |'m )?wondering\b|i wonder\b|just wondering\b|quick question\b|"
    r"can i ask\b|i want(?:ed)? to ask\b|let me ask\b|by the way\b|btw\b|so\s*$|also\s*$)", re.I)


def _is_emoji(ch: str) -> bool:
    return unicodedata.category(ch) == "So" or ch in "\u200d\ufe0f"


def clauses(sentence: str) -> list[str]:
    """``sentence`` cut at 「，」/「,」 and a spaced dash outside brackets and quotes (《你好，李焕英》 stays whole;
    "1,000" too) and after an emoji that text follows (「我办了年卡🏋️你平时运动吗」); each
    clause keeps its own text (an emoji stays with the clause before it), the comma dropped."""
    out, buf, depth = [], "", 0
    for i, ch in enumerate(sentence):
        if ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS and depth:
            depth -= 1
        nxt = sentence[i + 1:i + 2]
        dash = ch in "-–—" and buf[-1:] == " " and nxt == " "  # "challenge - day 4 - is fruit cheating?"
        if (ch in _CLAUSE_BREAK or dash) and depth == 0 and not (ch == "," and buf[-1:].isdigit() and nxt.isdigit()):
            out.append(buf)
            buf = ""
            continue
        buf += ch
        if depth == 0 and _is_emoji(ch) and nxt and not _is_emoji(nxt) and not nxt.isspace() or \
                depth == 0 and _is_emoji(ch) and nxt.isspace() and sentence[i + 2:i + 3].isalpha():
            out.append(buf)
            buf = ""
    out.append(buf)
    return [c.strip() for c in out if c.strip()]


def told_beside_question(sentence: str) -> str | None:
    """The statement a question-shaped ``sentence`` makes before (or after) the
    question it puts to the companion: the clauses left once the asking clauses at
    its end (「，你会弹什么乐器吗？」「, any food tips?」「，你呢？」) and at its start
    (「你知道吗，」"guess what,") are cut off, when what is left does not ask itself,
    does not only lead into the question (「我想问一下」) and supposes nothing
    (「如果我明天去北京」). None when ``sentence`` does not ask or nothing is left."""
    plain = to_simplified(sentence)
    if not is_question(plain):
        return None
    parts = clauses(sentence)
    if len(parts) < 2:
        return None
    start, end = 0, len(parts)
    while end > start and is_question(to_simplified(parts[end - 1])):
        end -= 1
    while start < end and is_question(to_simplified(parts[start])):
        start += 1
    told = parts[start:end]
    if not told or len(told) == len(parts):
        return None
    head = "，".join(told) if any("\u4e00" <= c <= "\u9fff" for c in sentence) else ", ".join(told)
    if is_question(to_simplified(head)) or _NOT_TOLD_RE.match(to_simplified(head)):
        return None
    return head


# -- the stage ----------------------------------------------------------------------

_END_RE = re.compile(r"[\s?？!！。.~～…,，、]+$")
_TAGS_ZH = ("对吗|对么|对吧|对嘛|对不对|对不|是吧|是吗|是么|是嘛|是不是|是不|没错吧|没错吗|没错吧|不是吗|不是么|"
            "没记错吧|没记错吗|我没记错吧|我记得没错吧|我说得对吗|我说的对吗|没说错吧|(?:你)?(?:还)?记得(?:吗|么|吧|不)|"
            "(?:你)?记不记得")
_TAG_ZH_RE = re.compile(rf"(?:{_TAGS_ZH})$")
_TAG_EN_RE = re.compile(
    r"(?:^|,)\s*(?:right|correct|am i right|isn't that right|isn't that so|innit|remember|you remember|"
    r"don't you remember|(?:do|does|did|is|are|am|was|were|have|has|had|can|could|will|would|should)(?:n't|\s+not)?\s+"
    r"(?:i|you|we|it|he|she|they|that|there))$", re.I)
_TAG_EN_MARKED_RE = re.compile(r",\s*(?:yeah|yes|no|huh|eh|ok|okay|true)$", re.I)  # only with a question mark
# a recall check: the person asks whether the companion remembers what they said
_RECALL_ZH_RE = re.compile(
    r"(?:跟|和|给|对|同|向)你们?(?:说|讲|提|聊|推荐|介绍|分享|讲述|描述|透露|吐槽|倾诉|说起|提起|提到|问)(?:过|了)|"
    r"告诉过你|你(?:还)?记得我|你记不记得|你还记不记得|你还记得|"
    r"(?:曾经?|之前|以前|上次|那次|那天)[^，,。？?]{0,8}?(?:跟|和|给|对|同|向)你们?(?:说|讲|提|聊|推荐|介绍|分享|提到|提起|说起)")
# a recall question's premise: what the person once said, then a question about it (「我曾经看过一本小说，它的名字是？」)
_PREMISE_RE = re.compile(r"曾经?|以前|之前|上次|那次|\d{1,2}月\d{1,2}[日号]")
_ABOUT_IT_RE = re.compile(r"^(?:那|那么)?(?:它|他|她|那|这|是|叫|其中)")
# what the companion once did for the speaker, told beside a question (「你给我推荐了一个海滨城市，它是？」,
# "You recommended me a book once, what was it called?"): a recall of the companion's words, no fact of the speaker's
_BY_YOU_RE = re.compile(
    r"^(?:你|您)(?:曾经?|之前|以前|上次|那次|那天|还|也|都)?(?:给|跟|和|对|向|帮|为|告诉|教|推荐给|介绍给|分享给)(?:过|了)?我|"
    r"^\s*you\s+(?:once\s+|already\s+|just\s+|recently\s+|have\s+|'ve\s+)?(?:told|recommended|suggested|gave|sent|"
    r"showed|taught|mentioned|shared|introduced)\b", re.I)
# a clause that only names the topic a question is about (「关于如何放松，你给了我什么建议？」, "About my trip, …")
_TOPIC_RE = re.compile(r"^\s*(?:关于|至于|说到|说起|谈到|提到|有关)[^，,]*$|^\s*(?:about|regarding|as for|speaking of)\b[^,]*$",
                       re.I)
# a quiz about the speaker's own fact: a fill-in (「厦门我最喜欢的景点是？」「它是？」), or what the speaker did, saw or
# likes asked of the companion, who can only know it from memory (「我当时看了什么展览」, "what was my favourite
# spot there?"); not advice (「我该买什么」「我去哪里玩好」), nor a tease put to the companion (「你猜我吃了什么」)
_QUIZ_ZH_RE = re.compile(r"是$|^[^你您该得要能好]*我[^你您该得要能好]*?(?:了|过|当时|那时|那天|最?喜欢的?|最爱的?|最感兴趣的?)"
                         r"[^你您该得要能好]*?(?:什么|啥|哪|谁|多少|几|多久)[^你您该得要能好]*$")
# with a premise marker (曾经, a date), the speaker asked about themselves: 「在5月2号我很烦恼，我因为什么事而烦恼？」
_ABOUT_ME_RE = re.compile(r"^[^你您该得要能好]*我[^你您该得要能好]*?(?:什么|啥|哪|谁|多少|几|多久)[^你您该得要能好]*$")
# what the speaker owns, then how many or what name it has, asked back (「我有一个羽毛球小组，里面有多少人呢？」):
# the companion can only know it from memory; not advice (「它叫什么名字好呢」)
_OWNED_RE = re.compile(r"^我(?:有|养了?|的)")
_COUNT_OR_NAME_RE = re.compile(r"^(?:那|那么)?(?:它|他|她|它们|他们|她们|里面|其中|这|那)[^你您该得要能好]*?"
                               r"(?:多少|几[个位只人]|叫什么|名字是|是谁)[^你您该得要能好]*$")
_QUIZ_EN_RE = re.compile(r"^\s*(?:and\s+)?(?:what|where|who|which|when|how\s+(?:many|much|long|old))\s+"
                         r"(?:did|was|were|had)\s+(?:i|my)\b", re.I)
_RECALL_EN_RE = re.compile(
    r"\b(?:did|have|had)\s+i\s+(?:ever\s+|already\s+|just\s+)?(?:tell|told|mention(?:ed)?|say|said|talk(?:ed)?|"
    r"share(?:d)?)\b|\bi\s+(?:already\s+|just\s+|once\s+|have\s+|'ve\s+)?(?:told|mentioned (?:to )?)you\b|"
    r"\bremember\s+(?:when|what|that|how)\s+i\s+(?:told|said|mentioned)|\bdo you (?:still )?remember\b|"
    r"\bdo you recall\b", re.I)
# a rhetorical question that carries a statement: 「我对花生过敏你知道吗！！」
_RHETORICAL_ZH_RE = re.compile(r"^(?P<s>.+?)[，,\s]*(?:你知道吗|你知道么|你知道不|你造吗|知道吗|你敢信吗?|你信吗|"
                               r"谁懂啊?|谁能懂)[?？!！。~～…\s]*$")
_RHETORICAL_EN_RE = re.compile(r"^(?P<s>.+?)\s*[,，]\s*(?:you know|can you believe it|can you believe that|believe it or not|"
                               r"would you believe it|who knew)[?!.\s]*$", re.I)
_REACTION_ZH_RE = re.compile(
    r"(?:(?:哈+|呵+|嘿+|嘻+|h{3,}|2333+|笑死(?:我了|了)?|笑哭|绝了|离谱|服了|无语|好家伙|我去|卧槽|天哪|天呐|我的天|救命|"
    r"真的假的|嗯+|恩+|哦+|噢+|喔+|啊+|唉+|哎+|诶|欸|好吧|好的|好滴|好嘞|行吧?|ok|知道了|我知道了|我懂了|我明白了|明白了?|"
    r"懂了|了解|收到|原来如此|原来是这样|这样啊|是这样啊|也是|确实|有道理|对对对?|对啊|是啊|可不是嘛|那倒是|我也是|"
    r"我也觉得|同感|\+1|草|xswl|yyds|awsl|谢谢你?|多谢|好的吧|嗯嗯|没事|没关系|没问题|晚安|早安|早上好|你好|哈喽|嗨)"
    r"[啊呀啦哦吧嘛哈呢~～!！。.，,、\s]*)+", re.I)
_REACTION_EN_RE = re.compile(
    r"(?:(?:lol+|lmao+|lmfao|rofl|ha(?:ha)+h?|he(?:he)+|omg|wow+|nice|cool|same|same here|me too|i see|i know|i know right|"
    r"got it|ok(?:ay)?|k|sure|yep|yup|yeah|true|fair|fair enough|makes sense|good point|totally|exactly|indeed|ikr|"
    r"smh|ugh|oh|ah|oops|damn|dang|whoa|yikes|welp|thanks|thank you|ty|thx|np|no worries|sounds good|"
    r"that's funny|so funny|hilarious|good night|night|gn|hmm+|mhm|hello|hello there|hi|hi there|hey|hey there|good morning|morning)[\s!.~,]*)+", re.I)
# whom a reaction is said to, left alone once the reaction is dropped: 「没问题，朋友！」「谢谢你，亲爱的」
_VOCATIVE_ZH_RE = re.compile(r"朋友|我的朋友|亲爱的|亲|宝贝?|兄弟|姐妹|老铁|哥们儿?|伙计|AI伴侣|伴侣|小?助手|大家|各位")
_LYRIC_RE = re.compile(r"[♪♫♬🎵🎶]|^\s*(?:歌词|lyrics?)\s*[:：]|^\s*(?:「[^」]+」|“[^”]+”|\"[^\"]+\"|『[^』]+』)\s*[。.!！~～]*\s*$",
                       re.I)
# correction: a marker, and what is right (and what was wrong)
_CORRECTION_MARK_RE = re.compile(r"说错了|打错了|写错了|打错字|口误|搞错了|记错了|弄错了|更正|纠正|不对不对|我是说|我的意思是|"
                                 r"\bi meant\b|\bi mean\b|\btypo\b|\bcorrection\b|\bmy bad\b|\bi misspoke\b|"
                                 r"\bscratch that\b|\bsorry\b|\boops\b", re.I)
_NOT_BUT_ZH_RE = re.compile(r"不是(?P<x>[^，,。！!？?；;\s]{1,20}?)[，,、\s]*(?:而|应该)?是(?P<y>[^，,。！!？?；;\s]{1,20})")
_RIGHT_ZH_RE = re.compile(r"(?:应该是|我是说|我的意思是|其实是|是)(?P<y>[^，,。！!？?；;\s]{1,20})")
_NOT_BUT_EN_RE = re.compile(r"\bi meant (?P<y>[^,.;!?]{1,40}?),?\s+not (?P<x>[^,.;!?]{1,40})"
                            r"|\bnot (?P<x2>[^,.;!?]{1,40}?),\s*(?:i meant |it's |it was |but )?(?P<y2>[^,.;!?]{1,40})", re.I)
_RIGHT_EN_RE = re.compile(r"\bi meant (?P<y>[^,.;!?]{1,40})", re.I)
_LEADING_INTERJECTION_ZH = re.compile(r"^(?:啊|哦|噢|喔|诶|欸|哎|唉|不对|额|呃|嗯)*[，,、\s]*")
_Y_TAIL_RE = re.compile(r"(?:才对|啦|了|哈|哦|呀|啊|吧)+$")
# another person's opinion: 「我同事说猫比狗聪明」, "My coworker thinks remote work makes people lazy"
_PEOPLE_ZH = ("前女友|前男友|女朋友|男朋友|老婆|老公|妻子|丈夫|妈妈|母亲|爸爸|父亲|哥哥|姐姐|弟弟|妹妹|好朋友|朋友|闺蜜|同事|"
              "老板|领导|上司|室友|舍友|同学|对象|儿子|女儿|老妈|老爸|妈|爸|奶奶|爷爷|外婆|外公|姥姥|老师|师傅|邻居|表哥|表姐|"
              "表弟|表妹|堂哥|堂姐|网友|朋友们|同事们|家人")
_OPINION_RE = re.compile(
    rf"^(?:(?:我|俺)(?:的|家)?(?:一个|一位|有个|那个)?(?:{_PEOPLE_ZH})|他|她|他们|她们|别人|人家)"
    r"(?:都|也|总|老|一直|还|就)?(?:说|觉得|认为|讲|感觉|坚持认为|表示)(?P<claim>.+)$"
    r"|^(?:my|our)\s+(?:\w+\s+){0,2}?(?:coworkers?|colleagues?|friends?|boss|mom|mum|dad|mother|father|sister|brother|"
    r"roommates?|wife|husband|girlfriend|boyfriend|partner|teacher|neighbou?r|parents?|family|cousin|aunt|uncle)"
    r"\s+(?:always\s+|still\s+|really\s+)?(?:thinks?|says?|said|believes?|reckons?|feels?|claims?|insists?)"
    r"(?:\s+that)?\s+(?P<claim2>.+)$", re.I)
_ABOUT_SOMEONE_RE = re.compile(r"[他她它我俺咱]|自己|\b(?:he|she|they|him|her|his|hers|their|them|himself|herself|"
                               r"themselves|i|i'm|me|my|we|our|us)\b", re.I)
_ONLY_WHEN_RE = re.compile(r"^\s*(?:在|于)?\s*(?:\d{2,4}年)?[\d一二三四五六七八九十]{1,2}月[\d一二三四五六七八九十]{1,3}[日号]?"
                           r"\s*(?:这天|那天|这一天|那一天|的时候|当天)?\s*$"
                           r"|^\s*(?:on|in)\s+[a-z]+\s+\d{1,2}(?:st|nd|rd|th)?\s*$", re.I)


# a thing's passing mishap, the speaker only its owner or object: "my phone battery is dying", "the wind broke my
# umbrella", "that video of the goat screaming is killing me", "there's a fly in my room" — the moment, no fact. A
# thing judged ("The views were amazing!", "That beach is super special to me") is no mishap: LoCoMo asks about those.
_MISHAP_EN_RE = re.compile(
    r"^\s*(?:(?:my|the|that|this)\s+(?!own\b)[a-z'’ ]{2,40}?\s+(?:(?:is|are|'s)\s+(?!going\b|getting\b|coming\b)"
    r"(?P<ing>[a-z]+ing)\b|keeps\s+[a-z]+ing\b|went\s+(?:cold|bad|off|dead|flat)\b|broke\b|won't\b|ruined\b|"
    r"stopped\b)|there'?s\s+an?\s+[a-z]+\s+(?:in|on)\s+my\b)", re.I)
_TRAILING_LAUGH_EN_RE = re.compile(r"(?:\s+(?:lol+|lmao+|ha(?:ha)+|omg|ugh|smh))+[\s!.~]*$", re.I)
MISHAP_MAX_WORDS = 10
"""Longest sentence (words) read as a thing's passing mishap (``_mishap``)."""


def _mishap(core: str) -> bool:
    """True when ``core`` (one English sentence, reactions dropped) tells only a
    thing's passing mishap with the speaker as its owner or object (``_MISHAP_EN_RE``):
    short (3 to ``MISHAP_MAX_WORDS`` words), no name, figure or CJK, no topic
    category (``guess_category`` OTHER: not a pet, a job, a person), no feeling
    (``memory.emotion.analyse`` valence under ``SOFT_VALENCE``: "my dog died" is
    grief, kept) and its -ing a verb, not a judgement ("… are amazing")."""
    from memory.emotion import SOFT_VALENCE, analyse

    core = _TRAILING_LAUGH_EN_RE.sub("", _bare(core))  # "my coffee went cold lol"
    words = re.findall(r"[A-Za-z'’]+", core)
    if not 3 <= len(words) <= MISHAP_MAX_WORDS or re.search(r"[\u4e00-\u9fff\d]", core) or \
            any(w[0].isupper() for w in words[1:] if w.lower() != "i"):
        return False
    m = _MISHAP_EN_RE.match(core)
    if m is None or (m["ing"] and m["ing"].lower() in _EN_NOT_VERB_ING):
        return False
    return guess_category(core) is Category.OTHER and abs(analyse(core).valence) < SOFT_VALENCE


def shape(sentence: str) -> str:
    """A sentence's shape for logs, never its text: ``len=…`` (characters),
    counts of CJK characters, Latin letters, digits, spaces and other symbols, and
    the Unicode category of its last character, e.g. ``len=9 cjk=7 latin=0
    digit=0 space=0 other=2 end=Po``."""
    cjk = sum(1 for c in sentence if "\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff")
    latin = sum(1 for c in sentence if c.isascii() and c.isalpha())
    digit = sum(1 for c in sentence if c.isdigit())
    space = sum(1 for c in sentence if c.isspace())
    end = unicodedata.category(sentence.rstrip()[-1]) if sentence.strip() else "-"
    return (f"len={len(sentence)} cjk={cjk} latin={latin} digit={digit} space={space} "
            f"other={len(sentence) - cjk - latin - digit - space} end={end}")


def _bare(text: str) -> str:
    """``text`` without trailing punctuation, spaces and emoji."""
    prev = None
    while text != prev:
        prev, text = text, _END_RE.sub("", _TRAILING_SYMBOLS_RE.sub("", text))
    return text


def _without_reactions(plain: str) -> str:
    """``plain`` without its leading and trailing reaction clauses (「笑死」, "lol",
    「嗯」); "" when every clause is one. Clauses are joined again with 「，」 (", "
    in a Latin sentence)."""
    parts = clauses(plain)
    reacts = [bool(_REACTION_ZH_RE.fullmatch(_bare(p))) or bool(_REACTION_EN_RE.fullmatch(_bare(p))) for p in parts]
    if not any(reacts):
        return plain
    start, end = 0, len(parts)
    while start < end and reacts[start]:
        start += 1
    while end > start and reacts[end - 1]:
        end -= 1
    if start == 0 and end == len(parts):
        return plain
    kept = parts[start:end]
    return ("，" if re.search(r"[\u4e00-\u9fff]", plain) else ", ").join(kept)


def unaddressed(text: str) -> str:
    """``text`` (simplified) without its leading and trailing reaction clauses and
    the clauses that only name whom it is said to (「你好啊，AI伴侣，我今天很兴奋」 →
    「我今天很兴奋」); ``text`` itself when nothing would be left."""
    plain = _without_reactions(to_simplified(text))
    parts = clauses(plain)
    kept = [p for p in parts if not _VOCATIVE_ZH_RE.fullmatch(_bare(p).strip())]
    if not kept or len(kept) == len(parts):
        return plain or text
    return ("，" if re.search(r"[\u4e00-\u9fff]", plain) else ", ").join(kept)


def _correction(core: str, plain: str) -> Reading | None:
    """A self-correction: a marker (说错了, 口误, "I meant", "sorry") in ``plain``
    (the whole sentence) with what is right in ``core`` (the sentence without its
    reactions), or a sentence opening with 「不是X，是Y」."""
    marked = _CORRECTION_MARK_RE.search(plain)
    if marked is None and not _NOT_BUT_ZH_RE.search(core):
        return None
    plain, whole = core, plain
    m = _NOT_BUT_ZH_RE.search(plain)
    if m is not None and (marked or _NOT_BUT_ZH_RE.match(_LEADING_INTERJECTION_ZH.sub("", plain))):
        return Reading(Act.CORRECTION, why="not-but", wrong=m["x"], right=_Y_TAIL_RE.sub("", m["y"]))
    m = _NOT_BUT_EN_RE.search(plain)
    if m is not None and marked:
        return Reading(Act.CORRECTION, why="not-but", wrong=(m["x"] or m["x2"]).strip(),
                       right=(m["y"] or m["y2"]).strip())
    if not marked or not re.match(r"^\W*(?:啊|哦|噢|诶|哎|额|呃|嗯|oh|oops|sorry|wait|ah)?\W*"
                                  r"(?:说错了|打错了|写错了|打错字|口误|搞错了|记错了|弄错了|更正|纠正|不对不对|"
                                  r"i meant|typo|correction|my bad|i misspoke|scratch that|oops|sorry)", whole, re.I):
        return None
    if re.match(r"^\W*sorry\b", whole, re.I) and not re.search(r"\bi meant\b|\bnot\b", whole, re.I):
        return None  # "Sorry I was late": an apology, not a correction
    rest = whole[marked.end():]
    m = _RIGHT_ZH_RE.search(rest) or _RIGHT_EN_RE.search(whole)
    return Reading(Act.CORRECTION, why="marker", right=_Y_TAIL_RE.sub("", m["y"]).strip() if m else "")


def _asks(core: str, addressed: bool) -> Reading | None:
    """The question readings, in order: a tag that checks a fact, a recall check,
    a rhetorical question carrying a statement, any other question (with the
    statement beside it, if any — none when the question quizzes the companion
    about the speaker's own fact, ``_is_quiz``, or recalls what was said: then
    what stands beside it is its premise; clauses telling what the companion
    did for the speaker, or only naming a topic, are dropped from it)."""
    bare = _bare(core)
    marked = bool(re.search(r"[?？]\s*$", _TRAILING_SYMBOLS_RE.sub("", core)))
    if bare != core.strip() or marked or _TAG_ZH_RE.search(bare):
        if _TAG_ZH_RE.search(bare) or _TAG_EN_RE.search(bare) or (marked and _TAG_EN_MARKED_RE.search(bare)):
            if len(clauses(bare)) > 1 or len(bare) > 4 or marked:
                return Reading(Act.QUESTION, told=_before_tag(bare), why="tag")
    if _RECALL_ZH_RE.search(core) or _RECALL_EN_RE.search(core):
        return Reading(Act.QUESTION, why="recall")
    m = _RHETORICAL_ZH_RE.match(core) or _RHETORICAL_EN_RE.match(core)
    if m is not None:
        said = m["s"].strip(" ，,")
        if said and is_speaker_statement(said, addressed):
            return Reading(Act.SELF, told=said, why="rhetorical")
        return Reading(Act.QUESTION, why="rhetorical")
    if not is_question(core):
        return None
    told = told_beside_question(core)
    if told is not None and _ONLY_WHEN_RE.match(to_simplified(told)):
        told = None  # 「在4月27号这天，我跟你说了什么？」: a day names no statement
    if told is not None:
        told_parts = clauses(told)
        asked = [c for c in clauses(core) if c not in told_parts]
        if _PREMISE_RE.search(told) and asked and (_ABOUT_IT_RE.match(asked[0]) or _BY_YOU_RE.match(asked[0])
                                                   or _ABOUT_ME_RE.search(_bare(asked[0]))):
            return Reading(Act.QUESTION, why="premise")  # the question asks about what it recalls, or what was said
        if asked and _OWNED_RE.match(to_simplified(told)) and _COUNT_OR_NAME_RE.search(_bare(asked[0])):
            return Reading(Act.QUESTION, why="premise")  # 「我有一个羽毛球小组，里面有多少人呢？」
        if any(_is_quiz(c) for c in asked):
            return Reading(Act.QUESTION, why="premise")  # 「我最近去厦门旅游了，厦门我最喜欢的景点是？」
        kept = [c for c in told_parts if not _BY_YOU_RE.match(to_simplified(c)) and not _TOPIC_RE.match(to_simplified(c))]
        if len(kept) < len(told_parts):  # 「你给我推荐了一个海滨城市，它是？」: the companion's deed, recalled; 「关于如何放松」
            told = ("，" if re.search(r"[\u4e00-\u9fff]", told) else ", ").join(kept) if kept else None
            if told is None:
                return Reading(Act.QUESTION, why="recall")
    return Reading(Act.QUESTION, told=told or "", why="beside" if told else "asks")


def _is_quiz(clause: str) -> bool:
    """True when a question's asking ``clause`` quizzes the companion about the
    speaker's own fact (``_QUIZ_ZH_RE``, ``_QUIZ_EN_RE``): what stands beside it is
    then the quiz's premise, not news."""
    bare = _bare(to_simplified(clause))
    return bool(_QUIZ_ZH_RE.search(bare) or _QUIZ_EN_RE.match(bare))


def _before_tag(bare: str) -> str:
    """What a tag question tells before the clause its tag checks: the tag checks
    the clause it follows (「我不喜欢看喜剧片，对吗」, "I hate hiking, right": nothing
    is told), and the clauses before that one stand ("I started my own store -
    pretty cool, huh": "I started my own store"); "" when none is left or what is
    left only leads in or asks."""
    parts = clauses(bare)
    last = parts[-1] if parts else ""
    alone = bool(_TAG_ZH_RE.fullmatch(last) or re.fullmatch(r"(?:right|correct|am i right|isn't that right|"
                                                            r"isn't that so|innit|remember|you remember|yeah|yes|no|"
                                                            r"huh|eh|ok|okay|true|\w+(?:n't)?\s+\w+)", last, re.I))
    told = parts[:-2] if alone else parts[:-1]
    if not told:
        return ""
    head = ("，" if re.search(r"[\u4e00-\u9fff]", bare) else ", ").join(told)
    if is_question(head) or _NOT_TOLD_RE.match(head) or not any(c.isalnum() for c in head):
        return ""
    return head


def _opinion(core: str) -> bool:
    """True when ``core`` tells another person's opinion of the world (「我同事说
    猫比狗聪明」), not what they said about themselves or the speaker (「我妈说她
    下个月退休」, "my mom says I work too much": the speaker's own news, DESIGN rule 5)."""
    m = _OPINION_RE.match(core)
    if m is None:
        return False
    claim = m["claim"] or m["claim2"] or ""
    return not _ABOUT_SOMEONE_RE.search(claim)


def _read(sentence: str, addressed: bool) -> Reading:
    plain = unicodedata.normalize("NFKC", to_simplified(sentence)).strip()  # full-width letters and punctuation
    if len(plain) < MIN_CHARS:
        return Reading(Act.REACTION, why="short")
    if plain.startswith("/"):
        return Reading(Act.REQUEST, why="command")
    if is_gateway_text(sentence):
        return Reading(Act.QUOTE, why="gateway")
    if _LYRIC_RE.search(plain):
        return Reading(Act.QUOTE, why="lyric")
    core = _without_reactions(plain)
    if not core or _VOCATIVE_ZH_RE.fullmatch(_bare(core)) and core != plain or _SMALL_TALK_ZH.match(_bare(core)) or _SMALL_TALK_EN.match(_bare(core)) and \
            not _FIRST_EN.search(core):
        return Reading(Act.REACTION, why="ack")
    fixed = _correction(core, plain)
    if fixed is not None:
        return fixed
    if is_request(core):  # "Tell me more when we meet, maybe next time we'll be there.": the statement stays
        told = told_beside_question(core) if is_question(core) else None
        return Reading(Act.REQUEST, told=told or "", why="beside" if told else "")
    asked = _asks(core, addressed)
    if asked is not None:
        return asked
    heard = _HEARSAY_RE.match(core)
    if heard and not (_FIRST_ZH.search(core[heard.end():]) or _FIRST_EN.search(core[heard.end():])):
        return Reading(Act.OTHER, why="hearsay")
    if _opinion(core):
        return Reading(Act.OTHER, why="opinion")
    if _ONLY_WHEN_RE.match(core):
        return Reading(Act.OTHER, why="fragment")  # 「在4月27号这天」: a day, no statement
    if names_nothing(core) and guess_category(core) in (Category.OTHER, Category.MOOD, Category.EVENT):  # nothing named
        # beyond reactions and moods ("I hate mornings" names a taste: a preference, the speaker's)
        if uptake_alone(_VOCATIVE_EN.sub("", unaddressed(core))):  # "I agree with you." 「我也这么觉得」: no mood
            return Reading(Act.REACTION, why="uptake")
        if is_speaker_statement(plain, addressed):  # 「我今天好累」"I'm so bored": the speaker's passing mood
            return Reading(Act.REACTION, told=sentence.strip(), why="mood")
        return Reading(Act.REACTION, why="chit-chat")
    if _mishap(core):
        return Reading(Act.REACTION, why="moment")
    if uptake_only(_VOCATIVE_EN.sub("", unaddressed(core))):  # 「谢谢你的建议，我会试试的」 "I really appreciate it, Jon!"
        return Reading(Act.REACTION, why="uptake")
    if is_speaker_statement(plain, addressed):  # the whole sentence: a leading "Yeah," keeps "work can be tough" out
        return Reading(Act.SELF, told=sentence.strip())
    if _WEATHER_ZH.search(core):
        return Reading(Act.REACTION, why="chit-chat")
    return Reading(Act.OTHER, why="subject")


@lru_cache(maxsize=8192)
def read(sentence: str, *, addressed: bool = False) -> Reading:
    """The speech act of one ``sentence`` (zh/en/mixed, traditional folded to
    simplified; emoji and full-width punctuation allowed) said by the person;
    ``addressed``: said to the bot (a private chat, or a group message addressing
    it), so that a statement without a subject is the speaker's. Cached (capture
    reads the same live memories message after message). Never raises: a
    sentence the stage cannot classify is ``Act.UNKNOWN``, logged by its
    ``shape`` at debug."""
    try:
        return _read(sentence or "", addressed)
    except Exception:  # noqa: BLE001 - an odd sentence keeps capture's former behaviour
        log.debug("speech act: sentence not classified (%s)", shape(sentence or ""))
        return Reading(Act.UNKNOWN)


def is_chitchat(line: str) -> bool:
    """The one chit-chat decision: True when every sentence of ``line`` reads as
    a reaction (``read``: greetings, acknowledgements, laughter, the weather, a
    passing mood — 「哈哈」「笑死」「困死了」「好冷啊」「我今天好累」, "lol", "same",
    "I'm so bored"). Recall lets such a line recall only memories that hold one
    of its words (``memory.recall``); capture stores nothing of it but the
    speaker's passing mood, which recall lets lapse (``memory.recall.MOOD_TTL_DAYS``).
    Measured on ``tests/data/speech_acts.tsv`` and its held-out part
    (``python -m bench speechact``)."""
    from memory.text import split_sentences

    sentences = split_sentences(line or "", semicolons=True)
    readings = [(s, read(s, addressed=True)) for s in sentences]
    # a sentence too short to be a statement is a reaction to capture, but 「猫」 names what it asks about
    return bool(readings) and all(r.act is Act.REACTION and (r.why != "short" or names_nothing(s)) for s, r in readings)


def is_claim(text: str) -> bool:
    """True when a stored memory's ``text`` reads as a statement (``read``, said to
    the companion) and may be one side of a change or a conflict; False for a
    question, reaction, request or quote (a remark such as 「嗯，我知道了。」 stored
    before this stage), or a line asking the listener to tell ("Let me know how it
    goes": kept, as LoCoMo's evidence has it, but it claims nothing)."""
    if _LET_ME_KNOW_RE.match(text):
        return False
    return read(text, addressed=True).act not in (Act.QUESTION, Act.REACTION, Act.REQUEST, Act.QUOTE)


_LET_ME_KNOW_RE = re.compile(r"^\W*(?:\w+[,!.]\s*)?let me know\b", re.I)


def told_text(text: str, *, addressed: bool = False) -> str:
    """The parts of ``text`` (a cleaned message, any number of sentences) that
    capture may write, joined by a space: a statement's sentence, a
    correction's, the ``told`` part of a question, an unclassified sentence
    whole; "" when there are none (a question that checks a fact, a recall check,
    a reaction). What a model's extracted facts must be found in."""
    from memory.text import split_sentences

    out = []
    for sent in split_sentences(text, semicolons=True):
        r = read(sent, addressed=addressed)
        if r.act in (Act.CORRECTION, Act.UNKNOWN):
            out.append(sent)
        elif r.told:
            out.append(r.told)
    return " ".join(out)


# -- an elliptical answer to the companion's question -----------------------------
# companion 「你们团队有多少人？」 → person 「八个人左右，都挺好相处的。」: no subject, no 我, yet a statement of
# the person's, read with the question it answers.

_ACK_LEAD_RE = re.compile(
    r"^\s*(?:(?:对|对的|对啊|对呀|是|是的|是啊|是呀|嗯+|恩+|没错|当然|有|有的|没有|没|不是|不|还好|还行|"
    r"yes|yeah|yep|yup|no|nope|nah|sure|of course|definitely|well|hmm+|um+|oh|ah)[啊呀呢嘛哦吧啦~～!！.。,，、\s]*)+",
    re.I)
_OFFER_RE = re.compile(r"要不要我|我(?:来|帮你|给你|陪你|替你)|需要我|让我|\b(?:shall|should) i\b|\bwant me to\b|"
                       r"\blet me\b|\bcan i (?:help|get|tell|show)\b", re.I)
_TO_PERSON_RE = re.compile(r"你|您|\byou(?:r|rs)?\b", re.I)
_WH_RE = re.compile(r"什么|啥|哪|谁|几|多少|多大|多久|\b(?:what|what's|where|where's|who|who's|which|when|how many|"
                    r"how much|how old|how long)\b", re.I)


def asks_the_person(line: str) -> int | None:
    """How many words an answer to the companion's ``line`` needs, or None when
    its last sentence does not ask the person about themselves (a question with
    你/您/you, not an offer such as 「要不要我给你讲个笑话？」): 1 after a question
    asking for a thing ("What's your dog's name?" → "Waffles!"), else 2."""
    from memory.text import split_sentences

    asked = split_sentences(line)
    if not asked or not is_question(to_simplified(asked[-1])) or not _TO_PERSON_RE.search(asked[-1]) \
            or _OFFER_RE.search(asked[-1]):
        return None
    return 1 if _WH_RE.search(to_simplified(asked[-1])) else 2


def answers(sentence: str, least: int) -> bool:
    """True when ``sentence`` answers the companion's question with content of its
    own: not a question, an instruction, the gateway's words, a greeting,
    acknowledgement or small talk, nor about the companion, and at least two CJK
    characters or ``least`` words (``asks_the_person``) once a leading 对/嗯/yes is
    dropped (「八个人左右，都挺好相处的。」)."""
    plain = to_simplified(sentence)
    rest = _ACK_LEAD_RE.sub("", plain).strip(" 。.!！~～…")
    if not rest or is_question(plain) or read(sentence, addressed=True).act is Act.QUESTION \
            or is_instruction_like(sentence) or is_gateway_text(sentence) or _SMALL_TALK_ZH.match(rest) \
            or _SMALL_TALK_EN.match(rest) or re.search(r"你|您|\byou\b", rest, re.I):
        return False
    return len(re.findall(r"[\u4e00-\u9fff]", rest)) >= 2 or len(re.findall(r"[A-Za-z0-9]+", rest)) >= least
