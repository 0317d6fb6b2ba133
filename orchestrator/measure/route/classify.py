"""Which kind of request a prompt is, by what its answer does, for routing it to the speculation
that wins for its kind (its length is read apart: measure/route/choose.py weighs the prompt's tokens
and the answer's against each server's prefill and decode costs).

The kinds: `chat` (free text: a question, a conversation), `code` (a program written anew),
`math` (a worked calculation), `summarize` (a shorter text from pasted text, or the pasted text
reworked), `edit` (the answer copies the pasted text: code changed in place, a passage quoted),
`translate` (the pasted text in another language) and `docqa` (a question over pasted
material, a short answer drawn from it). A draft model guesses code and worked arithmetic
well; n-gram lookup finds an edit's and a summary's words in the prompt; a docqa answer is
short, so its prompt's prefill, which a draft model pays again, decides. The classifier reads
only the prompt, by these rules, in this order:

1. The prompt is split into the ask and the pasted material: code fences are pasted whole; of
   the paragraphs, the first and the last ask where they are short (ASK_MAX characters; a
   prompt of one paragraph is all ask); the others are pasted.
2. With less than MIN_PASTED characters or MIN_SHARE of the prompt pasted, the prompt is a
   question: `code` when the ask names code (a language, function, script, query,
   implement...), `math` when it is arithmetic (three numbers or more, or step by step,
   probability, solve, calculate, show your working), `chat` otherwise.
3. Pasted material that the ask wants summarised (summarize, summary, key facts or points,
   bullets, headline, abstract, tl;dr) is `summarize`.
4. Pasted material inside a code fence, or an ask to copy (reply with only, the complete or
   whole or full ..., exactly, exact wording, quote, copied) is `edit`.
5. An ask to translate is `translate`.
6. An ask with a question (a question mark, "question", "answer") is `docqa`.
7. Other pasted material is `summarize` (the answer reworks the text: rewrite, repeat...).

The rules were written looking only at the first six prompts of each shipped suite; the last six
are held out, and `confusion` measures the rules on them (`specctl bench --also routed` shows
it). A suite is a kind by SUITE_KINDS (chat, qa and multiturn are `chat`; article and summarize
`summarize`); a category of the user's own is the kind most of its prompts are (`kind_of`).
Where a rule errs, the request goes to another kind's setting: slower, never wrong (every
setting's output is the target's).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specctl.orchestrator.measure.prompts import bodies

KINDS = ("chat", "code", "math", "summarize", "edit", "translate", "docqa")
SUITE_KINDS = {"chat": "chat", "qa": "chat", "multiturn": "chat", "article": "summarize",
               **{k: k for k in KINDS}}  # a shipped suite's kind (and a kind's own name)
DESIGN = 6  # the first prompts of each suite, which the rules were written from
MIN_PASTED = 120  # characters of pasted material below which a prompt is a question
MIN_SHARE = 0.3
ASK_MAX = 200  # characters: a longer first or last paragraph is pasted material, not an ask
READ = 1 << 18  # characters of a prompt the rules read: its first and last half of them

_CODE_ASK = re.compile(
    r"\b(python|javascript|typescript|rust|java|kotlin|swift|golang|c\+\+|c#|sql|bash|shell|"
    r"function|script|implement|code|query|regex|algorithm|api|compile|program)\b|```",
    re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_MATH_ASK = re.compile(r"step by step|probability|\bsolve\b|calculat|show your (working|reasoning)"
                       r"|\bequation", re.IGNORECASE)
_SUMMARY_ASK = re.compile(
    r"summar|key (facts|points)|bullet|headline|tl;?dr|\bgist\b|\babstract\b", re.IGNORECASE)
_COPY_ASK = re.compile(
    r"reply with only|only the (complete|rewritten|updated|corrected|full)|\bexact(ly)?\b|"
    r"exact wording|\bquot(e|ing)\b|\bcopied\b|\b(complete|whole|full) (code|function|class|"
    r"query|file|text|program|script|`)", re.IGNORECASE)
_TRANSLATE_ASK = re.compile(r"\btranslat", re.IGNORECASE)
_QUESTION_ASK = re.compile(r"\?|\bquestions?\b|\banswer", re.IGNORECASE)
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)  # an unclosed fence runs to the end


def kind(prompt: str) -> str:
    """The kind of `prompt` (one of KINDS), by the rules above. A prompt longer than READ
    characters is read as its two ends (the rules look for the ask there; the middle is pasted
    material either way), so a 24 MiB prompt costs what a 256 KiB one does."""
    if len(prompt) > READ:
        prompt = f"{prompt[:READ // 2]}\n\n{prompt[-(READ // 2):]}"
    ask, pasted = split(prompt)
    if len(pasted) < MIN_PASTED or len(pasted) < MIN_SHARE * len(prompt):
        if _CODE_ASK.search(ask):
            return "code"
        return "math" if len(_NUMBER.findall(ask)) >= 3 or _MATH_ASK.search(ask) else "chat"
    if _SUMMARY_ASK.search(ask):
        return "summarize"
    if "```" in pasted or _COPY_ASK.search(ask):
        return "edit"
    if _TRANSLATE_ASK.search(ask):
        return "translate"
    return "docqa" if _QUESTION_ASK.search(ask) else "summarize"


def split(prompt: str) -> tuple[str, str]:
    """(the ask, the pasted material): code fences are pasted whole; of the other paragraphs,
    the first and the last ask where they are at most ASK_MAX characters (a prompt of one
    paragraph asks whole); the paragraphs between, and a long first or last one, are pasted."""
    fenced = _FENCE.findall(prompt)
    parts = [p for p in re.split(r"\n\s*\n", _FENCE.sub("\n\n", prompt).strip()) if p.strip()]
    if len(parts) <= 1:
        return (parts[0] if parts else ""), "\n\n".join(fenced)
    ends = {0, len(parts) - 1}
    asks = [n for n in sorted(ends) if len(parts[n]) <= ASK_MAX]
    ask = "\n".join(parts[n] for n in asks)
    return ask, "\n\n".join([*(p for n, p in enumerate(parts) if n not in asks), *fenced])


def of_request(body: Mapping[str, Any]) -> str:
    """The kind of an OpenAI-style request: its last user message (chat), or its prompt
    (completions); `chat` when it has neither as text."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return kind(_text(message.get("content")))
        return "chat"
    prompt = _prompt(body)
    return kind(prompt) if prompt is not None else "chat"


@dataclass(frozen=True)
class Facts:
    """What the router reads of a request: its kind, its prompt's characters (every message's
    text: what the engine prefills), and the answer it asks for (`max_tokens` or
    `max_completion_tokens`; None where it names none)."""

    kind: str
    chars: int
    max_tokens: int | None = None


def facts(body: Mapping[str, Any], fmt: str = bodies.CHAT) -> Facts:
    """A request's Facts (gateway/asgi.py, for the pool's slot), read in its API's format
    (measure/prompts/bodies.py): a chat or completions body as such; any other as the
    conversation it carries, its kind the one its API fixes (fill-in-the-middle is code), else
    its last user turn's."""
    if fmt not in (bodies.CHAT, bodies.COMPLETIONS):
        said = bodies.conversation(fmt, body)
        ask = said.ask()
        return Facts(said.kind or (kind(ask) if ask is not None else "chat"), said.chars,
                     said.max_tokens)
    messages = body.get("messages")
    if isinstance(messages, list):
        chars = sum(len(_text(m.get("content"))) for m in messages if isinstance(m, dict))
    else:
        chars = len(_prompt(body) or "")
    wanted = [body.get(k) for k in ("max_completion_tokens", "max_tokens")]
    asked = next((n for n in wanted if isinstance(n, int) and not isinstance(n, bool)
                  and n > 0), None)
    return Facts(of_request(body), chars, asked)


def _prompt(body: Mapping[str, Any]) -> str | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else None


def _text(content: object) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(p.get("text", "")) for p in content
                           if isinstance(p, dict) and p.get("type") == "text")
    return ""


def kind_of(category: str, prompts: Iterable[str] = ()) -> str | None:
    """A tune category's kind: a shipped suite's by SUITE_KINDS; another the kind most of its
    `prompts` are (the first such on a tie); None without prompts."""
    if category in SUITE_KINDS:
        return SUITE_KINDS[category]
    counts = Counter(kind(p) for p in prompts)
    return counts.most_common(1)[0][0] if counts else None


def confusion(suites: Mapping[str, Sequence[str]], start: int = DESIGN
              ) -> dict[str, dict[str, int]]:
    """Rows: each suite (its true kind: SUITE_KINDS); columns: what the rules said, over its
    prompts from `start` (by default the held-out ones)."""
    out = {}
    for true, prompts in suites.items():
        row = dict.fromkeys(KINDS, 0)
        for prompt in prompts[start:]:
            row[kind(prompt)] += 1
        out[true] = row
    return out


def accuracy(matrix: Mapping[str, Mapping[str, int]]) -> float:
    """The share of prompts the rules put in their row's kind (a suite's by SUITE_KINDS)."""
    total = sum(sum(r.values()) for r in matrix.values())
    right = sum(r.get(SUITE_KINDS.get(true, true), 0) for true, r in matrix.items())
    return right / total if total else 0.0
