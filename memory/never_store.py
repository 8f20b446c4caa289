"""Never-store categories: clauses a tenant's memory must never hold, dropped
from a person's message BEFORE any extraction (heuristic or model) reads it.

Categories (``CATEGORIES``), each a set of zh and en rules over one clause —
the message cut at sentence ends, commas and semicolons (Chinese and ASCII,
full- and half-width), read in simplified characters and case-folded:

- ``health``: illnesses, diagnoses, treatment, medication, pregnancy, mental health;
- ``sexuality``: sexual orientation, gender identity, sex life;
- ``religion``: faith, worship, religious practice and belonging;
- ``politics``: parties, votes, elections, political views, protests;
- ``minors``: a child's age or school, or the speaker saying they are under 18;
- ``ids``: credentials with their value (``holds_secret``: a password, PIN,
  verification code…), card, account and ID numbers, passport, licence and
  social-security numbers. Contact details (a phone number, an e-mail address)
  are not: a person may well want the companion to keep them.

``DEFAULT_NEVER_STORE`` is ``("ids",)``, and ``ids`` is always in force:
a companion has no use for a credential or an identifier, and a recollection
must never say one. The other five are the special categories of personal
data (GDPR Art. 9; PIPL Art. 28, which adds minors under 14): a tenant lists
those it must not keep (``TenantSettings.never_store``). They are not on by
default because a companion is often told such things to remember them ("I
have a peanut allergy", 「我在备孕」), and dropping them silently would forget
what a person asked it to keep; an operator who may not hold them turns them on.

Precision and recall per category on ``tests/data/never_store.tsv`` are in
docs/recall.md. The rules read topics, not intent: "my friend has cancer"
is health as much as "I have cancer". Nothing here logs text.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable

from memory.text import to_simplified

__all__ = ["CATEGORIES", "DEFAULT_NEVER_STORE", "ALWAYS", "categories_of", "without_never_store", "holds_secret",
           "check_categories"]

CATEGORIES = ("health", "sexuality", "religion", "politics", "minors", "ids")
DEFAULT_NEVER_STORE = ("ids",)
ALWAYS = frozenset({"ids"})
"""Categories dropped whatever a tenant lists."""

# A credential with its value: 「我的银行卡密码是123456」, "my PIN is 4321", 「验证码：839201」,
# a card or ID number. 「我的WiFi密码忘了」 names no value and is kept.
_SECRET_RE = re.compile(
    r"(?:密码|口令|验证码|校验码|安全码|支付码|PIN码?|CVV2?|CVC)\s*(?:是|为|:|：|=)?\s*[A-Za-z0-9!@#$%^&*_.\-]{4,}"
    r"|(?:密码|口令|PIN码?)\s*(?:就是|也是|都是|是|为|设成了?|设为|改成了?|改为|用的是)\s*[^\s，,。？?]{2,}"
    r"|\b(?:password|passcode|passphrase|pin|cvv|cvc|security code|one-time code|otp)\b"
    r"\s*(?:is|was|:|=)\s*\S{4,}"
    r"|\b(?:password|passcode|passphrase)\b(?:\s+(?:for|to|of|on)\s+(?:my\s+|the\s+|our\s+)?[\w.@-]+"
    r"(?:\s+account)?)?\s*(?:is|was|'s|:|=)\s*(?!(?:in|on|at|the|a|an|too|so|very|not|still|what|same|easy|hard"
    r"|weak|strong|wrong|correct|saved|stored|written|expired|changed|reset|long|short)\b)\S{2,}"
    r"|(?<![\d-])(?:\d[ -]?){15,18}[\dXx](?![\d-])",
    re.IGNORECASE)

_RULES: dict[str, list[str]] = {
    "health": [
        r"[生得患]了?.{0,6}病|病了|病情|癌|肿瘤|糖尿病|高血压|心脏病|抑郁|焦虑症|双相|精神分裂|强迫症|多动症|自闭症|哮喘"
        r"|过敏|住院|出院|手术|化疗|放疗|吃药|服药|药物|处方|医生|医院|看病|确诊|诊断|怀孕|备孕|流产|艾滋|hiv|残疾"
        r"|血糖|血压|发烧|感冒|咳嗽|心理咨询|心理医生|自杀|自残|失眠|偏头痛|胰岛素|康复|复诊|体检报告|病假|骨折|痛风",
        r"\b(?:cancer|tumou?rs?|diabet\w*|depress(?:ion|ed)|anxiety|bipolar|schizophreni\w*|ocd|adhd|autis\w*|aids"
        r"|asthma|allerg\w*|surgery|operation on|chemo\w*|radiotherapy|hospital\w*|diagnos\w*|therap(?:y|ist)"
        r"|medication|meds|prescri\w*|antidepressants?|pills? for|pregnan\w*|miscarriage|disabilit\w*|disabled"
        r"|blood pressure|insulin|doctor|gp|sick(?! of)|illness|disease|migraine|flu|fever|suicid\w*|self[- ]harm"
        r"|rehab|mental health|psychiatrist|insomnia|panic attacks?|broken (?:arm|leg|wrist)|covid|infection)\b",
    ],
    "sexuality": [
        r"同性恋|双性恋|异性恋|无性恋|性取向|出柜|男同|女同|拉拉|基佬|跨性别|变性|性别认同|性生活|做爱|上床|性关系|约炮|性癖"
        r"|酷儿|lgbt|喜欢男生的男生|喜欢女生的女生|我是gay|我是les",
        r"\b(?:gay|lesbian|bisexual|bi|homosexual|heterosexual|straight guy|asexual|queer|transgender|trans (?:woman|man)"
        r"|sexual orientation|came out (?:to|as)|coming out|sex life|had sex|sleeping with|hook(?:ed)? up with"
        r"|kinks?|kinky|fetish\w*|lgbtq?\+?|non-?binary|pansexual|my pronouns)\b",
    ],
    "religion": [
        r"信教|信佛|信基督|信主|信耶稣|基督徒|基督教|天主教|穆斯林|伊斯兰|佛教|道教|信仰|做礼拜|礼拜|教堂|清真寺|烧香|拜佛|受洗|洗礼"
        r"|祷告|念经|斋月|皈依|无神论|犹太教|上帝|真主|耶稣|圣经|古兰经|吃斋|教会|查经|修行|菩萨保佑|还愿",
        r"\b(?:christian\w*|catholic\w*|protestant|muslim|islam\w*|jewish|judaism|buddhis\w*|hindu\w*|sikh|atheis\w*"
        r"|agnostic|church|mosque|synagogue|pray(?:ed|ing|s)?\b|prayers?|bible|quran|koran|baptiz\w*|baptis\w*"
        r"|ramadan|my faith|religio\w*|believe in god|god's|jesus|allah|mormon|jehovah|mass on sunday|sabbath"
        r"|kosher|halal|convert(?:ed)? to)\b",
    ],
    "politics": [
        r"政党|共产党|党员|入党|民主党|共和党|国民党|民进党|投票给|投了.{0,6}票|选票|大选|选举|政治|左派|右派|自由派|保守派"
        r"|支持(?:特朗普|拜登|川普)|抗议|游行|示威|政府|政权|台独|港独|法轮功|六四|人大代表|工会运动",
        r"\b(?:democrats?|democratic party|republicans?|labou?r party|tory|tories|conservative party|liberal party"
        r"|vot(?:ed|e|ing) (?:for|against|labou?r|tory|green)|elections?|ballot|left-wing|right-wing|leftist|socialis\w*"
        r"|communis\w*|libertarian|maga|trump|biden|protest\w*|political\w*|politics|campaign(?:ed|ing)? for"
        r"|brexit|party member|union organi[sz]\w*|parliament|senator|congress\w*)\b",
    ],
    "minors": [
        r"(?:儿子|女儿|孩子|宝宝|小孩|闺女|侄子|侄女|外甥|孙子|孙女|娃).{0,12}(?:\d{1,2}|[一二两三四五六七八九十]{1,3})岁"
        r"|(?:儿子|女儿|孩子|宝宝|小孩|闺女|侄子|侄女|外甥|孙子|孙女|娃).{0,12}(?:上|读|在)(?:小学|幼儿园|初中|初[一二三]|高[一二三]"
        r"|[一二三四五六]年级|托班)"
        r"|我(?:今年|才|刚满|只有)?(?:1[0-7]|[一]?[一二三四五六七]|十[一二三四五六七]?)岁"
        r"|我(?:在|正在)?(?:上|读)(?:小学|初中|初[一二三]|高[一二三]|[一二三四五六]年级)|我是(?:初|高)中生|我是小学生|未成年",
        r"\bmy (?:son|daughter|kid|child|baby|toddler|grandson|granddaughter|niece|nephew|boy|girl)\b.{0,40}"
        r"(?:\b(?:1[0-7]|[1-9]|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
        r"|fifteen|sixteen|seventeen)\b(?:[- ]years?[- ]old| yo\b|\b)|kindergarten|nursery|preschool|elementary"
        r"|primary school|middle school|high school|\d(?:st|nd|rd|th) grade|grade \d|year \d\b)"
        r"|\bi(?:'m| am) (?:only |just )?(?:1[0-7]|thirteen|fourteen|fifteen|sixteen|seventeen)\b(?!\s*(?:minutes|hours|km|kg|%))"
        r"|\bi(?:'m| am) in (?:\d(?:st|nd|rd|th) grade|middle school|high school|year \d\b)|\bunderage\b|\bminor\b",
    ],
    "ids": [
        r"身份证|护照号|社保号|社保卡号|医保卡号|驾照号|驾驶证号|银行卡号|信用卡号|卡号|账号是",
        r"\b(?:ssn|social security(?: number)?|passport (?:number|no\.?)|driver'?s licen[cs]e (?:number|no\.?)"
        r"|account number|card number|iban|routing number|sort code|national id|tax id)\b",
    ],
}
_COMPILED = {cat: [re.compile(p, re.IGNORECASE) for p in pats] for cat, pats in _RULES.items()}
# a mark followed at once by a letter or digit ends no clause ("Zebra!9981", 「abc。123」): a value goes on
_CLAUSE_END = re.compile(r"([。！？!?；;\n，,]+(?![A-Za-z0-9])|\.(?=\s|$))")


def holds_secret(text: str) -> bool:
    """True when ``text`` states a credential with its value (a password, PIN,
    verification or security code followed by a value of 4+ characters, or a
    password told with a copula — 「密码就是我生日0315」, "the password for my
    email is sunshine" — whatever its length, in zh or en) or holds a 16–19 digit card or 18-character ID number: 「我的WiFi密码忘了」
    is not one, 「我的银行卡密码是123456」 is. Part of the ``ids`` category."""
    return bool(_SECRET_RE.search(to_simplified(text)))


def categories_of(clause: str) -> frozenset[str]:
    """The never-store categories one clause falls in (empty: none)."""
    return _categories_in(clause, CATEGORIES)


def _categories_in(clause: str, wanted: Iterable[str]) -> frozenset[str]:
    """The categories among ``wanted`` that one clause falls in: ``categories_of``
    less what is not asked (capture asks each clause of each message only of the
    tenant's categories, often ``ids`` alone)."""
    plain = to_simplified(clause).casefold()
    found = {cat for cat in wanted if cat in _COMPILED and any(p.search(plain) for p in _COMPILED[cat])}
    if "ids" in wanted and holds_secret(clause):
        found.add("ids")
    return frozenset(found)


def _clauses(text: str) -> list[tuple[str, str]]:
    """``text`` as ``(clause, the separator after it)``; joined back they are ``text``."""
    parts = _CLAUSE_END.split(text)
    return [(parts[i], parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]


def without_never_store(text: str, categories: Iterable[str]) -> tuple[str, Counter]:
    """``text`` less every clause in one of ``categories`` (ALWAYS included),
    and how many clauses each category dropped. A clause's separator goes with
    it; the kept clauses keep theirs, so the rest reads as it was written."""
    wanted = ALWAYS | frozenset(categories)
    dropped: Counter = Counter()
    kept: list[str] = []
    for clause, sep in _clauses(text):
        hit = _categories_in(clause, wanted) if clause.strip() else frozenset()
        if hit:
            dropped.update(sorted(hit))
            continue
        kept.append(clause + sep)
    return ("".join(kept).strip() if dropped else text), dropped


def check_categories(names: Iterable[str]) -> list[str]:
    """``names`` if each is a category; raises ValueError naming the first that is
    not and the nearest valid one (difflib's closest match, else the list)."""
    out = []
    for name in names:
        key = str(name).strip().casefold()
        if key not in CATEGORIES:
            near = difflib.get_close_matches(key, CATEGORIES, n=1, cutoff=0.4)
            hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(CATEGORIES)}"
            raise ValueError(f"unknown never_store category {name!r}; {hint}")
        out.append(key)
    return out
