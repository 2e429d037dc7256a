"""OpenClaw 2026.9.6's ``extractKeywords`` (``query-expansion.ts``): the words of a
conversational query worth a search of their own.

OpenClaw runs one keyword search per such word when its AND query finds too little; memq
uses them for the path index (:mod:`pipeline.search.paths`): a file whose name holds one of
them is a path match. Lower-cased segments split on white space and punctuation; Japanese
segments cut into Latin, katakana, kanji and hiragana runs (kanji runs also as bigrams);
Chinese segments into characters and bigrams; a Korean segment kept, and its stem without a
trailing particle when useful. Stop words (English, Spanish, Portuguese, Arabic, Korean,
Japanese, Chinese: OpenClaw's lists, copied below), Latin words under 3 letters, numbers and
punctuation runs are dropped, and each word is kept once.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["extract_keywords"]

#: OpenClaw's Korean stop words (also a stem's test), and below all seven lists as one set
#: (``isQueryStopWordToken``).
KO_STOP_WORDS = frozenset((
    "가", "가다", "같이", "거", "거기", "것", "곳", "과", "그", "그것", "그녀", "그들",
    "그래서", "그러나", "그러면", "그런데", "그리고", "까지", "께", "나", "나는", "나를",
    "나중", "내가", "내일", "너", "너무", "누구", "는", "대로", "더", "도", "되다", "등", "때",
    "또", "또는", "로", "를", "마다", "만", "많이", "매우", "무엇", "뭐", "밖에", "보다",
    "부탁", "부터", "분", "수", "아까", "아니다", "아주", "어디", "어떤", "어떻게", "어제",
    "언제", "없다", "에", "에게", "에서", "여기", "오늘", "오다", "와", "왜", "우리", "으로",
    "은", "을", "의", "이", "이것", "이다", "있다", "잘", "저", "저것", "저기", "저희", "전에",
    "정말", "제발", "좀", "주다", "중", "지금", "처럼", "최근", "하다", "하지만", "한테",
))
STOP_WORDS = frozenset((
    "a", "about", "above", "after", "ago", "agora", "ahora", "ajuda", "amanhã", "an", "and",
    "antes", "anything", "are", "as", "at", "ayer", "ayuda", "be", "because", "been", "before",
    "being", "below", "between", "but", "by", "can", "com", "como", "con", "could", "cuando",
    "cuándo", "cómo", "da", "de", "del", "depois", "despues", "después", "did", "do", "does",
    "donde", "during", "dónde", "e", "earlier", "el", "ela", "elas", "ele", "eles", "ellas",
    "ellos", "em", "en", "entre", "es", "esa", "ese", "essa", "esse", "esta", "estar", "este",
    "eu", "everything", "favor", "fazer", "find", "foi", "for", "foram", "from", "fue",
    "fueron", "get", "give", "haber", "hacer", "had", "has", "have", "he", "help", "hoje",
    "how", "hoy", "i", "if", "in", "into", "is", "it", "just", "la", "las", "later", "los",
    "mas", "may", "mañana", "me", "meu", "mi", "might", "minha", "my", "nos", "nosotras",
    "nosotros", "nothing", "now", "nós", "o", "of", "on", "onde", "ontem", "or", "os", "ou",
    "our", "over", "para", "pero", "please", "por", "porque", "porqué", "porquê", "quando",
    "que", "qué", "quê", "recentemente", "recently", "recientemente", "se", "ser", "she",
    "should", "show", "si", "sobre", "something", "son", "stuff", "são", "tell", "tener", "ter",
    "that", "the", "them", "then", "these", "they", "thing", "things", "this", "those",
    "through", "to", "today", "tomorrow", "tu", "tus", "um", "uma", "umas", "un", "una", "unas",
    "under", "unos", "uns", "usted", "ustedes", "você", "vocês", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "why", "will", "with", "would", "y", "yesterday",
    "yo", "you", "your", "é", "أصبح", "أنا", "أو", "أين", "إلى", "ال", "الآن", "الى", "اليوم",
    "امس", "ب", "بالأمس", "بعد", "بل", "بين", "تكون", "تلك", "ثم", "ذلك", "ساعد", "صار", "على",
    "عن", "غدا", "فضلا", "في", "قبل", "ك", "كان", "كانت", "كيف", "ل", "لكن", "لماذا", "مؤخرا",
    "ماذا", "متى", "مع", "ممكن", "من", "من فضلك", "نحن", "هذا", "هذه", "هل", "هم", "هنا",
    "هناك", "هو", "هي", "و", "يكون", "يمكن", "あそこ", "あの", "ある", "あれ", "いつ", "いる",
    "から", "ここ", "こと", "この", "これ", "さっき", "しかし", "した", "して", "する", "そこ",
    "そして", "その", "それ", "ため", "だけ", "できる", "です", "でも", "どう", "どこ", "どれ",
    "なぜ", "なる", "の", "ます", "また", "まで", "もの", "より", "与", "东西", "为什么",
    "之前", "之后", "也", "了", "事", "事情", "什么", "今", "今天", "今日", "他", "他们",
    "以前", "以后", "会", "但", "但是", "何", "你", "你们", "做", "再", "刚才", "到", "前",
    "去", "又", "只", "可以", "吗", "吧", "呀", "告诉", "呢", "和", "哪个", "哪些", "啊", "啦",
    "嘛", "因为", "在", "地", "多少", "她", "如果", "它", "就", "帮", "帮忙", "後", "得",
    "怎么", "想", "我", "我们", "或", "所以", "才", "找", "把", "明天", "明日", "昨天", "昨日",
    "是", "最近", "有", "来", "现在", "用", "的", "看", "着", "给", "而", "能", "虽然", "被",
    "要", "誰", "让", "说", "请", "过", "还", "这", "这个", "这些", "那", "那个", "那些", "都",
)) | KO_STOP_WORDS
#: ``KO_TRAILING_PARTICLES``, in OpenClaw's order (the first that ends a word is stripped).
KO_PARTICLES = (
    "에서", "으로", "에게", "한테", "처럼", "같이", "보다", "까지", "부터", "마다", "밖에",
    "대로", "은", "는", "이", "가", "을", "를", "의", "에", "로", "와", "과", "도", "만",
)

# JavaScript's \s (String.prototype.split(/[\s\p{P}]+/u)): white space plus U+FEFF.
_JS_SPACE = frozenset("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                      + "".join(chr(c) for c in range(0x2000, 0x200B)))
_KANA = re.compile("[\u3040-\u30ff]")
_JA_PARTS = re.compile("[a-z0-9_]+|[\u30a0-\u30ffー]+|[\u4e00-\u9fff]+|[\u3040-\u309f]{2,}")
_HAN = re.compile("[\u4e00-\u9fff]")
_HAN_RUN = re.compile("^[\u4e00-\u9fff]+$")
_HANGUL = re.compile("[\uac00-\ud7af\u3131-\u3163]")
_HANGUL_SYLLABLE = re.compile("[\uac00-\ud7af]")
_ASCII_WORD = re.compile("^[a-z0-9_]+$", re.IGNORECASE)
_LATIN = re.compile("^[a-zA-Z]+$")
_DIGITS = re.compile("^[0-9]+$")


def _segments(text: str) -> list[str]:
    """``text.split(/[\\s\\p{P}]+/u).filter(Boolean)``."""
    out, current = [], []
    for ch in text:
        if ch in _JS_SPACE or unicodedata.category(ch).startswith("P"):
            if current:
                out.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        out.append("".join(current))
    return out


def _korean_stem(token: str) -> str | None:
    for particle in KO_PARTICLES:
        if len(token) > len(particle) and token.endswith(particle):
            return token[:-len(particle)]
    return None


def _useful_korean_stem(stem: str) -> bool:
    if _HANGUL_SYLLABLE.search(stem):
        return len(stem) >= 2
    return bool(_ASCII_WORD.match(stem))


def _tokens(text: str) -> list[str]:
    """OpenClaw's ``tokenize`` (unicode61 tokenizer: bigrams for Chinese/Japanese kanji)."""
    tokens: list[str] = []
    for segment in _segments(text.strip().lower()):
        if _KANA.search(segment):
            for part in _JA_PARTS.findall(segment):
                tokens.append(part)
                if _HAN_RUN.match(part):
                    tokens += [part[i:i + 2] for i in range(len(part) - 1)]
        elif _HAN.search(segment):
            chars = [c for c in segment if _HAN.match(c)]
            tokens += chars + ["".join(chars[i:i + 2]) for i in range(len(chars) - 1)]
        elif _HANGUL.search(segment):
            stem = _korean_stem(segment)
            stem_stop = stem is not None and stem in KO_STOP_WORDS
            if segment not in KO_STOP_WORDS and not stem_stop:
                tokens.append(segment)
            if stem and stem not in KO_STOP_WORDS and _useful_korean_stem(stem):
                tokens.append(stem)
        else:
            tokens.append(segment)
    return tokens


def _valid(token: str) -> bool:
    """``isValidKeyword``: not a Latin word under 3 letters, a number or punctuation."""
    if not token or (_LATIN.match(token) and len(token) < 3) or _DIGITS.match(token):
        return False
    return not all(unicodedata.category(c)[0] in "PS" for c in token)


def extract_keywords(query: str) -> list[str]:
    """``extractKeywords(query)`` (unicode61 tokenizer): the query's keywords, in order."""
    seen: dict[str, None] = {}
    for token in _tokens(query):
        if token not in STOP_WORDS and _valid(token):
            seen.setdefault(token)
    return list(seen)
