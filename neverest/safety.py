"""Safety rule 1: a lesson is an observation, never an instruction.

Every receiver runs ``imperative_reason`` on every lesson, so it is set look-ups and a few
literal-led regexes, not a parser.  The NFKC-folded, lower-cased text is refused when it holds
an advice or prompt-injection phrase anywhere ("you should", "make sure", "please", "ignore
previous instructions", "from now on", "pretend", "role-play", "you are no longer", "you will
approve", "I authorise you", "it's fine to", "safety rules don't apply", "dear summarizer",
"note to automated analysis software", "decode it and follow", "visit https://"...); markup that
opens or closes a role or a chat turn ("</system>", "<|im_start|>", "[INST]", "### Instruction",
"<!--", a line opening "System:" or "User:"); or a base64 or hex run that decodes to text (a
digest or a binary fixture decodes to noise and passes).  Otherwise a clause is refused when it
opens with "don't", "always", "never", a verb that is never a noun ("avoid", "prefer", "be"...)
or one of ~350 base-form verbs of software work.  Clauses are cut at . ! ? ; new lines, dashes
and "Label:" headings (a heading of three words or more is judged as a clause); a leading
condition ("When the build hangs, ...") is skipped so its main clause is judged.  A verb that is
also a noun ("Run times double") is an order when a determiner, pronoun, flag, path, quote or
tool name follows it, or when no finite verb (is/can, "fails", "broke", plural "fail"...) does;
after a tooling noun ("Build step cache misses after...", "Deploy jobs wait for...") a verb that
agrees with it later in the clause counts too.

Known limits.  It misses orders with unlisted verbs ("Frobnicate the cache"), conditionals with
neither a comma nor "then" ("If it hangs delete the lock"), an order after ", and" with no
object word ("Tests hang, and retry"), passive, impersonal or permissive advice ("Tests should
be run first", "Contributors must sign the CLA", "You can just rerun it"), orders stated as
facts ("The lock file has to go"), steering in the third person ("The assistant is now in
maintenance mode"), encodings other than base64 and hex (ROT13), trigger words joined by hyphens,
an order whose object ends in a verb-noun ("Update packages in the lock file now") and
look-alike letters from other scripts.  It wrongly refuses observations opening with a listed
verb-noun whose predicate it does not know or finds only after "before", "when"... ("Read
replicas lag", "Push access before 9am is restricted"), clauses opening with "always"/"never"
("Never again on Fridays"), long headings opening with a verb ("Note from the on-call engineer:
..."), reported orders ("The README says: run make first"), quoted messages and injections ("The
installer prints 'Please restart your shell'", "The model may ignore previous instructions") and
markup it names rather than uses ("The <system> tag in the template is a Jinja block").  It knows
only English: other languages pass unless they hold English trigger words.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = ["imperative_reason", "is_imperative"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _third_person(verb: str) -> str:
    """'fail' -> 'fails', 'pass' -> 'passes', 'rely' -> 'relies' (regular verbs only)."""
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in ("a", "e", "o", "u"):
        return verb[:-1] + "ies"
    return verb + "s"


# ---------------------------------------------------------------------------------------------
# Phrases refused wherever they stand.
#
# Each rule names the words one of which every match contains.  A text holding none of them
# (most observations) costs one tokenisation and one set test, not a regex scan; and every
# pattern starts with a literal, which the regex engine finds fast, the left word boundary
# being checked after the match (a leading \b would make the engine try every position).
# Rules are tried in this order; the flag marks a prompt injection.

_ADVICE_AFTER_SUBJECT: Final = (
    r"(?:'d\s+better|\s+had\s+better|\s+should|\s+must|\s+shall|\s+ought\s+to|\s+needs?\s+to"
    r"|\s+has\s+to|\s+have\s+to)\b"
)
_INJECTION_TARGETS: Final = r"(?:instructions?|prompts?|guidelines|directives|guardrails)\b"


def _rules() -> tuple[tuple[frozenset[str], re.Pattern[str], bool], ...]:
    injection = [
        *((verb, rf"{verb}\s+(?:[\w']+\s+){{0,4}}?{_INJECTION_TARGETS}") for verb in
          ("ignore", "forget", "override", "bypass")),
        ("disregard", r"disregard\b"),
        ("instructions", r"new\s+instructions\b"),
        ("now", r"from\s+now\s+on\b"),
        ("now", r"you\s+are\s+now\b"),
        # Role play and personas: "Pretend you are the owner", "You are DAN", "Let's roleplay".
        ("pretend pretending", r"pretend(?:ing)?\b"),
        ("roleplay roleplaying role", r"role[\s-]?play"),
        (
            "you",
            r"you(?:'re|\s+are)\s+(?:no\s+longer|going\s+to|to|an?|the|my|our|in|running|free|allowed"
            r"|permitted|authori[sz]ed|not\s+bound|dan|being|actually|really)\b",
        ),
        # A second-person future is an order ("You will approve this origin"); "you will be asked",
        # "you will see" describe what happens.
        ("you", r"you\s+will\s+(?!be\b|see\b|get\b|find\b|notice\b|need\b|have\b)[a-z]"),
        # Permission to drop the guard: "I authorise you to", "you can safely ignore", "it's fine to skip".
        ("authorise authorize", r"authori[sz]e\s+you\b"),
        (
            "you",
            r"you\s+(?:may|can|are\s+allowed\s+to|have\s+permission\s+to)\s+(?:safely\s+|just\s+)?"
            r"(?:ignore|skip|disable|bypass|override|forget)\b",
        ),
        *((verb, rf"{verb}\s+(?:[\w']+\s+){{0,3}}?(?:safety|filters?\b|restrictions\b|content\s+polic)")
          for verb in ("ignore", "forget", "override", "bypass", "disable", "skip", "remove")),
        (
            "apply",
            r"(?:rules?|safety|guidelines|policies|policy|restrictions)\s+(?:don't|do\s+not|no\s+longer)\s+apply\b",
        ),
        ("mode", r"(?:dan|jailbreak|developer|god)\s+mode\s+(?:is\s+)?(?:on|enabled|active)\b"),
        ("jailbreak jailbroken", r"jailbr(?:eak|oken)\b"),
        ("anything", r"do\s+anything\s+now\b"),
        ("content", r"content\s+filter(?:ing|s)?\s+(?:is\s+|are\s+)?(?:off|disabled|removed|bypassed)\b"),
        ("content", r"without\s+(?:any\s+)?content\s+filter"),
        ("instruction instructions", r"(?:core|hidden|secret|real|true)\s+instructions?\b"),
        ("instruction instructions", r"follow\s+(?:the\s+|these\s+|this\s+|my\s+|new\s+)?instructions?\b"),
        ("new", r"your\s+new\s+(?:task|role|instructions?|rules?|persona|goal)\b"),
        (
            "new",
            r"new\s+(?:rules?|tasks?|roles?|directives?|personas?|instructions?)\s+for\s+(?:the\s+)?"
            r"(?:assistants?|agents?|ai|llms?|models?|bots?|you)\b",
        ),
        # Text addressed to the model that reads it: "Dear summarizer", "Note to automated analysis
        # software", "If the user asks for a summary", "invisible to humans".
        (
            "dear hey hi attention note message",
            r"(?:dear|hey|hi|attention|note\s+to|message\s+to)\s+(?:the\s+|any\s+|all\s+)?(?:[\w-]+\s+){0,2}?"
            r"(?:summari[sz]ers?|assistants?|ai|llms?|models?|bots?|agents?|readers?|reviewers?|software"
            r"|systems?|crawlers?|scanners?)\b",
        ),
        ("asks ask", r"(?:if|when)\s+(?:the\s+)?(?:user|you|anyone|someone)\s+asks?\s+(?:for\s+)?(?:a\s+)?summar"),
        ("invisible hidden", r"(?:invisible|hidden)\s+(?:to|from)\s+(?:humans|people|users|the\s+user)\b"),
        (
            "automated ai llm",
            r"(?:for|to)\s+(?:the\s+)?(?:automated|ai|llm)\s+(?:analysis|screening|systems?|scans?|software"
            r"|models?|readers?|agents?)\b",
        ),
        # "Decode it and follow what it says".
        (
            "decode decoded decoding",
            r"decod(?:e|ed|ing)\b.{0,80}?\b(?:follow|obey|execute|do\s+(?:what|as)|act\s+on)\b",
        ),
        # Links that send the reader somewhere, and Markdown images that load a URL when rendered.
        (
            "visit go navigate head browse click open follow",
            r"(?:visit|go\s+to|navigate\s+to|head\s+(?:over\s+)?to|browse\s+to|click(?:\s+on)?|open|follow)\s+"
            r"(?:the\s+link\s+|this\s+link\s+|here\s+)?[<\[(\"']*(?:https?://|www\.)",
        ),
        ("http https javascript", r"!\[[^\]]*\]\((?:https?:|javascript:)"),
    ]
    advice = [
        (
            "you",
            r"you(?:(?:'d|\s+had)\s+better|(?:'ll|\s+will|\s+would|\s+may|\s+might)\s+(?:want|need)\s+to"
            r"|\s+(?:should|must|shall|need\s+to|have\s+to|ought\s+to|(?:have\s+)?got\s+to)"
            r"|'ve\s+got\s+to)\b",
        ),
        *((subject, subject + _ADVICE_AFTER_SUBJECT) for subject in
          ("one", "we", "everyone", "everybody", "nobody", "agents", "assistants", "claude", "copilot")),
        *((role, rf"the\s+{role}{_ADVICE_AFTER_SUBJECT}") for role in
          ("agent", "assistant", "ai", "llm", "bot")),
        *((modal, rf"{modal}\s+(?:always|never)\b") for modal in ("should", "must")),
        *((word, rf"{word}\s+to\b") for word in
          ("best", "better", "wiser", "safer", "advisable", "preferable")),
        (
            "idea wise recommended important essential crucial necessary mandatory required",
            r"it(?:'s|\s+is|'d\s+be|\s+would\s+be)\s+(?:a\s+good\s+idea|wise|recommended|important|essential"
            r"|crucial|necessary|mandatory|required)\s+to\b",
        ),
        (
            "recommended advised encouraged discouraged",
            r"(?:is|are)\s+(?:strongly\s+|highly\s+)?(?:recommended|advised|encouraged|discouraged)\b",
        ),
        (
            "fix trick solution workaround remedy practice way",
            r"the\s+(?:fix|trick|solution|workaround|remedy|best\s+practice|right\s+way|correct\s+way)"
            r"\s+is\s+to\b",
        ),
        # "To make sure the cache is warm, CI ..." states a purpose, not an order.
        ("sure", r"make(?<!\bto\smake)\s+sure\b"),
        ("sure", r"be\s+sure\s+to\b"),
        ("remember", r"remember\s+to\b"),
        ("forget", r"(?:don't|do\s+not|dont)\s+forget\b"),
        ("please", r"please\b"),
        ("kindly", r"kindly\b"),
        ("let", r"let(?:'s|\s+us)\b"),
        ("consider", r"consider\s+using\b"),
        ("need", r"no\s+need\s+to\b"),
        (
            "fine ok okay safe allowed",
            r"it(?:'s|\s+is)\s+(?:fine|ok|okay|safe|allowed)\s+to\b",
        ),
        ("free", r"feel\s+free\s+to\b"),
        ("circumstances", r"under\s+no\s+circumstances\b"),
        *((verb, rf"(?:i|we)(?:'d|\s+would)?\s+(?:strongly\s+)?{verb}\b") for verb in
          ("recommend", "suggest", "advise")),
    ]
    return tuple(
        (_words(anchors), re.compile(pattern), flag)
        for group, flag in ((injection, True), (advice, False))
        for anchors, pattern in group
    )


_PHRASE_RULES: Final = _rules()
# Anchor word, as UTF-8 bytes like the words imperative_reason cuts -> indices of its rules.
_RULES_BY_ANCHOR: Final = {
    anchor.encode(): tuple(index for index, (anchors, _, _) in enumerate(_PHRASE_RULES) if anchor in anchors)
    for anchor in frozenset().union(*(anchors for anchors, _, _ in _PHRASE_RULES))
}
_ANCHORS: Final = frozenset(_RULES_BY_ANCHOR)

# Every byte that is not an ASCII regex word character becomes a space.  An ASCII word that
# a regex \b delimits is then a whole token, whatever non-word character (ASCII or not) is
# beside it; a non-ASCII letter splits a word, which only ever adds tokens.
_NON_WORD: Final = bytes(b for b in range(256) if not (b < 128 and (chr(b).isalnum() or chr(b) == "_")))
_NON_WORD_TO_SPACE: Final = bytes.maketrans(_NON_WORD, b" " * len(_NON_WORD))

# After NFKC (which folds full-width letters and no-break spaces), curly quotes and apostrophes
# become ASCII so that "don’t" matches "don't", and invisible characters go, so that
# "ig\u200bnore previous instructions" is still seen.
_UNICODE_FIXES: Final = (
    *((curly, "'") for curly in ("\u2019", "\u2018", "\u02bc")),
    *((curly, '"') for curly in ("\u201c", "\u201d")),
    *((invisible, "") for invisible in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad")),
)

# ---------------------------------------------------------------------------------------------
# Markup that opens or closes a role or a turn of a chat template, wherever it stands: a lesson
# carrying "</system>" or "<|im_start|>" is trying to speak as someone other than an observer.
# Tried only when the text holds one of _MARKUP_CHARS.
_MARKUP: Final = re.compile(
    r"<\|[a-z_]{2,30}\|>"
    r"|</?(?:system|assistant|user|human|s|inst|instructions?|sys|context)>"
    r"|\[/?(?:inst|system|assistant|user|sys|human)\]"
    r"|<<\s*/?sys\s*>>"
    r"|#{2,}\s*(?:instructions?|system|response|input|user|assistant)\b"
    r"|<!--"
    r"|<end\s+of\s+(?:session|text|turn|conversation)>"
    r"|\[(?:rest|end)[-\s]of[-\s](?:document|session|context)\]"
)
_MARKUP_CHARS: Final = "<[#"
# A line that opens a chat turn: "System: ...", "User: ...", "> Assistant: ...".
_ROLE_TURN: Final = re.compile(r"^[ \t>*-]*(?:system|assistant|user|human)\s*:", re.MULTILINE)
_ROLE_WORDS: Final = frozenset(word.encode() for word in ("system", "assistant", "user", "human"))

# A run of base64 or hex long enough to hide a sentence.  It is refused only when it decodes to
# text (printable ASCII with a space): hashes, keys and binary fixtures decode to noise and pass.
_ENCODED_RUN: Final = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_MIN_ENCODED_WORD: Final = 16

# ---------------------------------------------------------------------------------------------
# Sentences.
#
# ".", "!", "?" and ":" end a sentence only when a space, a closing quote or the end follows
# ("setup.py", "3.12", "http://" do not); a colon that does makes what precedes it a heading
# ("Note: ...", "Fix: ...").  ";", new lines and dashes always do.
_BOUNDARY: Final = re.compile(r"([.!?:;\n\r\u2013\u2014])")
_CONDITIONAL_MARKS: Final = frozenset(".!?:")
_AFTER_MARK: Final = frozenset(" \t\"')]*_")

# What a bullet or a list number is made of ("- ", "* ", "1. ", "2) ").
_MARKERS: Final = " \t0123456789-*#>•.()"

# ---------------------------------------------------------------------------------------------
# Words of a clause.

# Stripped from both ends of a token before it is compared with the word lists.
# "-" is not stripped: a leading "-" marks a command-line flag.
_EDGE: Final = "\"'`()[]{}<>*_.,!?:;«»#•+"

# Words that, opening a clause, order or forbid whatever follows.
_PROHIBITIVE: Final = _words("don't dont always never")

# Verbs that are never the noun subject of an observation.
_ALWAYS_IMPERATIVE: Final = _words(
    "avoid prefer ensure consider remember forget be please kindly refrain beware verify double-check "
    "let disregard"
)

# Base forms of verbs an instruction about software work opens with.  Many are nouns too
# ("Run times double"); what follows the word decides (see _clause_reason).
_VERBS: Final = _words(
    """
    accept add adjust allow answer append apply approve archive ask assert assign assume avoid back
    backup bisect block bookmark break bring build bump bundle cache call cancel cap catch cd change
    check checkout cherry-pick chmod choose chown chunk clean clear click clone close collect
    comment commit compare compile comply compress configure confirm connect convert copy create
    curl cut debounce debug declare decrease define delete deploy describe destroy detach diff
    disable dispatch do document double downgrade download drop dump edit embed empty enable encode
    enforce escalate escape exclude execute exit expand expect explain export extend extract fail
    fall favor favour fetch file fill filter find fix flag flush focus follow force fork format free
    freeze generate get give go grant grep handle hard-code hardcode have help hide hold ignore
    implement import include increase increment index init initialise initialize inline insert
    inspect install invalidate invoke isolate keep kill label launch leave limit link lint list load
    lock log look lower maintain make map mark measure memoize mention merge migrate mock modify
    monitor mount move name note notify obey open optimise optimize output override package paginate
    parse pass patch pause pick pin ping pipe place plan poll populate port post prefix prepare
    prepend print prioritise prioritize profile prune publish pull purge push put query queue quit
    quote raise read rebase rebuild recompile record recreate redirect reduce refactor refresh
    regenerate reinstall reject release reload remove rename reopen reorder repeat rephrase replace
    reply report request require rerun reserve reset resize resolve respond restart restore restrict
    resume retry return reuse reveal revert review rewrite roll rollback rotate run save say scan
    schedule search send separate serve set setup share shut sign simplify skip sleep sort source
    specify split squash ssh stage start stash stay stick stop store stream strip submit summarise
    summarize swap switch sync tag tail take tell terminate test think throttle tidy time toggle
    touch trace track translate treat trigger trim truncate trust try tune turn tweak uncomment undo
    uninstall unlock unpin unset update upgrade upload use validate vendor wait warm watch wipe wrap
    write yank zip act pretend visit begin acknowledge disclose decode imagine roleplay
    """
)

# Verbs after which a bare verb is the object's action, not a predicate: "Make tests pass".
_CAUSATIVE: Final = _words("make let have help get watch see")
_CAUSED: Final = _words("pass fail work run break crash succeed hang go stop start behave finish")

# After an opening verb, these make it an order: "Run the tests", "Install it", "Do all".
_OBJECT_WORDS: Final = _words(
    "the a an this that these those it them him her me us your my our their its all any every no some "
    "each only both everything anything nothing something one whatever"
)

# Command names: "Run make", "Use go 1.22", "Try pytest -x".
_TOOLS: Final = _words(
    """
    apt apt-get awk bash black brew bun bundle cargo chmod chown clang cmake conda cp curl deno
    docker dotnet eslint flutter gcc gem gh git go gradle grep helm jest journalctl jq kubectl make
    mv mvn mypy ninja node nox npm npx pip pip3 pipx pnpm podman poetry prettier pytest python
    python3 rake rm rsync ruff rustup scp sed sh ssh sudo swift systemctl tar terraform tox tsc uv
    vite vitest webpack wget xargs yarn zsh
    """
)

# After an opening verb these are ambiguous ("Set up the venv" / "Log in fails"): an order
# unless a finite verb follows.
_PARTICLES: Final = _words(
    "to with before after up out off down in on into onto over for from again first now back away "
    "through via instead locally globally manually once twice here there"
)

# Finite auxiliaries and modals: "Build is slow", "Install scripts can hang".
_AUXILIARIES: Final = _words(
    """
    are aren't can can't cannot could couldn't did didn't does doesn't had hadn't has hasn't have
    haven't is isn't may might must shall should shouldn't was wasn't were weren't will won't would
    wouldn't
    """
)

# Predicates of a noun subject ("Lock files go stale", "Sort order differs").  These are
# seldom nouns, so each form counts wherever it stands after the first word.
_VERB_PREDICATES: Final = _words(
    """
    accumulate allow appear ask assume become behave belong choke collide come complain contain
    depend differ disappear dislike diverge emit exceed expect expire fail fill follow generate get
    go grow hang happen hide ignore insist keep lack leave like live lose matter mean need occur
    overlap persist prefer prevent produce refuse reject rely remain require seem serialise
    serialize skip stall stay succeed survive take tend vanish vary want work
    """
)
# Predicates that are also everyday nouns ("Fix crashes", "Remove line breaks", "Log misses").
# Their plural-agreeing base form counts two words in ("Cache misses spike"); their -s form
# only within two words of a first word that is itself mostly a noun ("Watch mode leaks").
_NOUN_PREDICATES: Final = _words(
    "break return spike crash leak miss hit pass conflict clash shadow override flake pile cause "
    "mention include run start stop trigger change double strip end"
)
_PLURAL_PREDICATES: Final = _VERB_PREDICATES | _NOUN_PREDICATES | _words("do don't")
# Third-person forms that are safe although their base form is a common noun ("memory use").
_SINGULAR_PREDICATES: Final = frozenset(_third_person(verb) for verb in _VERB_PREDICATES) | _words(
    "uses lags says shows prints writes reads loads"
)
_NOUN_SINGULARS: Final = frozenset(_third_person(verb) for verb in _NOUN_PREDICATES)
_NOUNISH_LEADS: Final = _words(
    """
    backup build cache call check checkout clone commit compile copy deploy diff download dump
    export file flag format import index install link lint lock map merge migrate mock output patch
    ping poll port profile publish push query queue refresh release reload request rerun reset
    rollback run scan schedule setup sort start stash stop stream sync tag test trace update upgrade
    upload watch
    """
)

# A clause opening with a tooling noun that is also a verb ("Build step cache misses after the
# upgrade", "Deploy jobs wait for the lock") is a noun subject when, past its second word, a verb
# agrees with it: a base form right after a plural noun, or a third-person form from the fourth
# word on.  The word before must not be a preposition, determiner or conjunction ("Build images
# with pull", "Test it on a copy"), and the verb must not end the clause ("Update packages in the
# lock file"): both make the candidate a noun of the object.
_NOUN_LEADS: Final = _NOUNISH_LEADS | _words("stage trigger log")
_LEAD_PREDICATES: Final = _VERBS | _VERB_PREDICATES | _NOUN_PREDICATES | _words(
    "reach arrive finish cover peak cluster land show slow spike"
)
_LEAD_SINGULARS: Final = frozenset(_third_person(verb) for verb in _LEAD_PREDICATES)
_NOT_BEFORE_PREDICATE: Final = _OBJECT_WORDS | _words(
    """
    of for in on at from to by with into onto over under about after before without via per and or
    then also just not is are was were has have had this
    """
)


# Simple pasts that are never participles: always a predicate ("Upgrade broke the build").
_SIMPLE_PASTS: Final = _words("broke went took ran became began fell grew came wrote threw gave drove rose")

# Pasts that are also participles ("-ed", "made", "kept"...) are a predicate only when no
# noun follows ("Install failed twice"), not an adjective ("Use pinned versions"), nor a
# passive with its agent ("Delete files created by the installer").
_PARTICIPLES: Final = _words("made kept lost sent left built got found held hung stood spent")
_TIME: Final = _words("time times")
_NOT_PARTICIPLES: Final = _words("need speed feed seed embed exceed proceed succeed hundred naked wicked")
_AGENT_PREPOSITIONS: Final = _words("by via into from")
_AFTER_PREDICATE: Final = _OBJECT_WORDS | _PARTICLES | _words(
    """
    at without during under when while because since until unless if and but or so as than not
    silently quietly yesterday today overnight repeatedly intermittently randomly often sometimes
    always never too also then again
    """
)

# Finite wherever they stand after the first word.
_FINITE: Final = _AUXILIARIES | _SINGULAR_PREDICATES | _SIMPLE_PASTS

# Words at which the search for a finite verb stops: what follows belongs to another clause
# ("Run the tests that fail").
_CLAUSE_BREAKS: Final = _words(
    "that which who whom whose where when whenever if unless until while because since as so but "
    "though although whether once before after"
)

# Words skipped at the start of a clause.  The sequencing ones ("then", "so", "instead")
# also mark what follows a comma as a clause of its own, judged in full.
_SEQUENCE: Final = _words(
    "then so but instead otherwise also just simply thus therefore hence rather now next finally first "
    "firstly secondly lastly afterwards afterward additionally ideally preferably"
)
_FILLERS: Final = _SEQUENCE | _words(
    "and or plus maybe perhaps probably definitely really actually basically generally usually "
    "normally typically again"
)

# A comma fragment opening with these is a leading condition or setting; the main clause
# follows the comma ("When the build hangs, delete the lock file").
_SUBORDINATORS: Final = _words(
    "if when whenever once after before unless until till while whilst since because as though although "
    "even whether where wherever should given"
)
_INTRODUCERS: Final = _SUBORDINATORS | _words(
    "in on at for to with without under during inside outside within from by per via upon here there "
    "sometimes often"
)

# Every word _finite_verb_follows looks at twice (besides "-ed" forms).
_SCANNED: Final = (
    _CLAUSE_BREAKS | _FINITE | _NOUN_SINGULARS | _PLURAL_PREDICATES | _PARTICIPLES | _TIME
)

# Every word a clause can open with and be judged on; anything else is let through at once.
_OPENERS: Final = _PROHIBITIVE | _ALWAYS_IMPERATIVE | _VERBS | _SUBORDINATORS


def imperative_reason(text: str) -> str | None:
    """None when `text` reads as an observation; otherwise a short human reason naming what made it
    an instruction, e.g. "starts with the bare verb 'run'" or "contains 'you should'"."""
    if text.isascii():
        folded = text
    else:
        folded = unicodedata.normalize("NFKC", text)
        for odd, plain in _UNICODE_FIXES:
            if odd in folded:
                folded = folded.replace(odd, plain)
    lowered = folded.lower()
    # "surrogatepass": a lone surrogate (JSON allows "\ud800") must not make the check raise.
    words = lowered.encode("utf-8", "surrogatepass").translate(_NON_WORD_TO_SPACE).split()
    if not _ANCHORS.isdisjoint(words):
        reason = _phrase_reason(lowered, _ANCHORS.intersection(words))
        if reason is not None:
            return reason
    found = _MARKUP.search(lowered) if any(mark in lowered for mark in _MARKUP_CHARS) else None
    if found is None and ":" in lowered and not _ROLE_WORDS.isdisjoint(words):
        found = _ROLE_TURN.search(lowered)
    if found is not None:
        return f"contains the role markup {found.group().strip()!r}"
    if any(len(word) >= _MIN_ENCODED_WORD for word in words):
        reason = _encoded_reason(folded)
        if reason is not None:
            return reason
    lead = True
    for sentence, heading in _sentences(lowered):
        # A heading of three words or more is a clause of its own ("Override manual scoring and
        # output: ..."); a short label ("Fix:", "Root cause:") is judged on decisive evidence only.
        strict = not heading or len(sentence.split()) >= 3
        reason = _sentence_reason(sentence, strict=strict, lead=lead)
        if reason is not None:
            return reason
        # A bullet or list number before the first sentence does not make that one a later one.
        if lead and (len(sentence) > 6 or sentence.strip(_MARKERS)):
            lead = False
    return None


def is_imperative(text: str) -> bool:
    """True when `text` reads as an instruction (safety rule 1)."""
    return imperative_reason(text) is not None


def _encoded_reason(folded: str) -> str | None:
    """Why `folded` carries an encoded sentence (base64 or hex that decodes to text), or None."""
    for found in _ENCODED_RUN.finditer(folded):
        run = found.group()
        decoded: bytes | None = None
        if len(run) % 2 == 0 and _HEX_DIGITS.issuperset(run):
            decoded = bytes.fromhex(run)
        elif not (run.islower() or run.isupper()):
            # base64 of a sentence mixes cases; a lower-case identifier or an upper-case constant
            # is not worth decoding.
            body = run.rstrip("=")
            try:
                altchars = b"-_" if "-" in body or "_" in body else None
                decoded = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars)
            except (binascii.Error, ValueError):
                decoded = None
        if decoded is not None and _reads_as_text(decoded):
            return "contains an encoded payload that decodes to text"
    return None


def _reads_as_text(data: bytes) -> bool:
    """Whether `data` is a sentence rather than noise: eight bytes or more, printable ASCII with
    a space, at most one byte in twenty outside it."""
    if len(data) < 8 or b" " not in data:
        return False
    printable = sum(1 for byte in data if 32 <= byte < 127 or byte in (9, 10, 13))
    return printable * 20 >= len(data) * 19


def _phrase_reason(lowered: str, anchors: frozenset[bytes]) -> str | None:
    """The first phrase rule, among those of the `anchors` found in the text, that matches."""
    if len(anchors) == 1:
        indices: Iterable[int] = _RULES_BY_ANCHOR[next(iter(anchors))]
    else:
        indices = sorted({index for anchor in anchors for index in _RULES_BY_ANCHOR[anchor]})
    for index in indices:
        _, pattern, injection = _PHRASE_RULES[index]
        for found in pattern.finditer(lowered):
            before = lowered[found.start() - 1 : found.start()]
            if before.isalnum() or before == "_":
                continue  # inside a longer word, e.g. "bit is important to"
            phrase = " ".join(found.group().split())
            return f"contains the prompt-injection phrase {phrase!r}" if injection else f"contains {phrase!r}"
    return None


def _sentences(lowered: str) -> list[tuple[str, bool]]:
    """The sentences of `lowered`, each with whether it is a heading (ends with ": ")."""
    if " - " in lowered or " -- " in lowered:
        lowered = lowered.replace(" -- ", "\n").replace(" - ", "\n")
    pieces = _BOUNDARY.split(lowered.rstrip(" \t\r\n.!?"))
    sentences: list[tuple[str, bool]] = []
    current = pieces[0]
    for index in range(1, len(pieces), 2):
        mark, rest = pieces[index], pieces[index + 1]
        if mark in _CONDITIONAL_MARKS and rest and rest[0] not in _AFTER_MARK:
            current += mark + rest
        else:
            sentences.append((current, mark == ":"))
            current = rest
    sentences.append((current, False))
    return sentences


def _sentence_reason(sentence: str, *, strict: bool, lead: bool) -> str | None:
    """Judge one sentence: its main clause in full, the comma fragments after it on decisive
    evidence only (they are as often list items as clauses), unless a sequencing word opens them.
    A heading (not `strict`) is judged on decisive evidence only."""
    fragments = sentence.split(",")
    last = len(fragments) - 1
    main_pending = True
    for position, fragment in enumerate(fragments):
        word, clause, sequenced = _opening(fragment)
        if not word:
            continue
        at_start, lead = lead, False
        if main_pending:
            if position < last and word in _INTRODUCERS:
                continue  # "When the build hangs, ...": the main clause follows the comma.
            main_pending = False
            clause_strict = strict
        else:
            clause_strict = strict and sequenced
        if word in _OPENERS or (word.startswith("re-") and word[3:] in _VERBS):
            opening = "starts with" if at_start else "a clause starts with"
            reason = _clause_reason(clause.split(), strict=clause_strict, opening=opening)
            if reason is not None:
                return reason
    return None


def _opening(fragment: str) -> tuple[str, str, bool]:
    """The first word of `fragment` past bullets and filler words, the fragment from that word
    on, and whether a sequencing word ("then", "instead"...) was skipped on the way."""
    sequenced = False
    rest = fragment
    while True:
        parts = rest.split(None, 1)
        if not parts:
            return "", "", sequenced
        token = parts[0]
        word = token.strip(_EDGE)
        tail = parts[1] if len(parts) > 1 else ""
        if word in _FILLERS:
            sequenced = sequenced or word in _SEQUENCE
        elif word == "note" and tail.startswith("that "):
            tail = tail[5:]  # "Note that X" announces an observation; X is still judged.
        elif word and word != "-" and not (token[-1] in ".)" and (len(token) == 2 or token[:-1].isdigit())):
            return word, rest, sequenced  # not a bullet or a list number ("-", "1.", "a)")
        rest = tail


def _clause_reason(tokens: list[str], *, strict: bool, opening: str) -> str | None:
    """Why the clause `tokens` opens with an order, or None.  When not strict, only decisive
    evidence counts (an object word after the verb, a prohibition before one)."""
    first = tokens[0].strip(_EDGE)
    following = tokens[1] if len(tokens) > 1 else None
    second = following.strip(_EDGE) if following is not None else None
    if first == "do" and second == "not":
        return f"{opening} 'do not'"
    if first in _PROHIBITIVE:
        if strict or second in _VERBS or second in _ALWAYS_IMPERATIVE:
            return f"{opening} {first!r}"
        return None
    if first in _SUBORDINATORS:
        if strict and "then" in tokens:
            # "If the build hangs then delete the lock": the part after "then" is the main clause.
            consequence = tokens[tokens.index("then") + 1 :]
            if consequence:
                return _clause_reason(consequence, strict=True, opening="a clause starts with")
        return None
    if first in _ALWAYS_IMPERATIVE:
        ordered = True
    elif following is None or not second:
        ordered = strict
    elif second == "of":
        ordered = False  # a noun subject: "Use of tabs breaks the linter"
    elif _is_object(following, second):
        ordered = True
    elif not strict:
        ordered = False
    elif second in _PARTICLES or second[0].isdigit():
        ordered = not _finite_verb_follows(first, tokens, 2)
    else:
        ordered = not _finite_verb_follows(first, tokens, 1)
    return f"{opening} the bare verb {first!r}" if ordered else None


def _is_object(token: str, word: str) -> bool:
    """Whether the word after an opening verb is plainly its object: a determiner or pronoun,
    a tool, a --flag, a path, a VAR=value assignment or something quoted."""
    return (
        word in _OBJECT_WORDS
        or word in _TOOLS
        or token[0] in "\"'`"
        or word.startswith(("-", "~", "./", "/", "$"))
        or "/" in word
        or "=" in word
    )


def _finite_verb_follows(first: str, tokens: list[str], begin: int) -> bool:
    """Whether tokens[begin:] hold the finite verb of a clause whose subject starts with
    `first`, the opening verb-noun: then `first` was a noun, not an order."""
    causative = first in _CAUSATIVE
    nounish = first in _NOUNISH_LEADS
    noun_lead = first in _NOUN_LEADS
    plural_head = len(tokens) > 1 and _is_plural_noun(tokens[1].strip(_EDGE))
    previous = tokens[begin - 1].strip(_EDGE)
    for index in range(begin, len(tokens)):
        word = tokens[index].strip(_EDGE)
        if word in _CLAUSE_BREAKS:
            return False
        if (
            noun_lead
            and index >= 2
            and index + 1 < len(tokens)
            and previous not in _NOT_BEFORE_PREDICATE
            and (
                (word in _LEAD_PREDICATES and (plural_head or _is_plural_noun(previous)))
                or (index >= 3 and word in _LEAD_SINGULARS)
            )
        ):
            return True
        if word not in _SCANNED and not word.endswith("ed"):
            previous = word
            continue  # most words: nouns, adjectives, prepositions
        if (
            word in _FINITE
            or (nounish and index <= 2 and word in _NOUN_SINGULARS)
            or (
                index >= 2
                and word in _PLURAL_PREDICATES
                and previous != "to"
                and not (causative and word in _CAUSED)
            )
        ):
            return True
        if word in _PARTICIPLES or word in _TIME or (word.endswith("ed") and len(word) > 4):
            after = tokens[index + 1].strip(_EDGE) if index + 1 < len(tokens) else None
            if word in _TIME:
                if after == "out":
                    return True  # "Test runs time out"
            elif word not in _NOT_PARTICIPLES and (
                after is None or (after in _AFTER_PREDICATE and after not in _AGENT_PREPOSITIONS)
            ):
                return True
        previous = word
    return False


def _is_plural_noun(word: str) -> bool:
    """Whether `word` looks like a plural noun ("jobs", "previews"), not "is", "this" or "class"."""
    return len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word not in _OBJECT_WORDS
