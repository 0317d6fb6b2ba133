"""Which kind of request a prompt is (chat, code, summarize, edit), for routing it to the
speculation that wins for its kind.

The kinds differ in what a draft can guess: code is regular (a draft model guesses it well);
summarize and edit answers copy the pasted text (n-gram lookup finds it in the prompt); chat has
neither. The classifier reads only the prompt, by these rules, in this order:

1. The prompt is split into the ask (its first paragraph, and its last one when text is pasted
   between) and the pasted material (code fences whole, and the paragraphs between). With less
   than 120 characters or 30% of the prompt pasted, it is `code` when the ask names code (a
   language, function, script, query, class, implement...) and `chat` otherwise.
2. Pasted material that the ask wants summarised (summarize, summary, key facts or points,
   bullet points, headline, tl;dr, "in two sentences") is `summarize`.
3. Pasted material inside a code fence, or an ask to copy (reply with only, the complete or whole
   or full ..., exactly, exact wording, quote, copied) is `edit`: the answer repeats most of it.
4. Other pasted material is `summarize` (the answer reworks the text: rewrite, translate...).

The rules were written looking only at the first six prompts of each shipped suite; the last six
are held out, and `confusion` measures the rules on them (`specctl bench --also routed` shows
it). Where a rule errs, the request goes to another kind's setting: slower, never wrong (every
setting's output is the target's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

KINDS = ("chat", "code", "summarize", "edit")
DESIGN = 6  # the first prompts of each suite, which the rules were written from
MIN_PASTED = 120  # characters of pasted material below which a prompt is a question
MIN_SHARE = 0.3
READ = 1 << 18  # characters of a prompt the rules read: its first and last half of them

_CODE_ASK = re.compile(
    r"\b(python|javascript|typescript|rust|java|kotlin|swift|golang|c\+\+|c#|sql|bash|shell|"
    r"function|method|class|script|implement|code|query|regex|algorithm|api|compile|"
    r"program)\b|```", re.IGNORECASE)
_SUMMARY_ASK = re.compile(
    r"summar|key (facts|points)|bullet|headline|tl;?dr|\bin (one|two|three|a few) sentences?"
    r"|\bgist\b|\babstract\b", re.IGNORECASE)
_COPY_ASK = re.compile(
    r"reply with only|only the (complete|rewritten|updated|corrected|full)|\bexact(ly)?\b|"
    r"exact wording|\bquot(e|ing)\b|\bcopied\b|\b(complete|whole|full) (code|function|class|"
    r"query|file|text|program|script|`)", re.IGNORECASE)
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)  # an unclosed fence runs to the end


def kind(prompt: str) -> str:
    """The kind of `prompt` (one of KINDS), by the rules above. A prompt longer than READ
    characters is read as its two ends (the rules look for the ask there; the middle is pasted
    material either way), so a 24 MiB prompt costs what a 256 KiB one does."""
    if len(prompt) > READ:
        prompt = f"{prompt[:READ // 2]}\n\n{prompt[-(READ // 2):]}"
    ask, pasted = split(prompt)
    if len(pasted) < MIN_PASTED or len(pasted) < MIN_SHARE * len(prompt):
        return "code" if _CODE_ASK.search(ask) else "chat"
    if _SUMMARY_ASK.search(ask):
        return "summarize"
    if "```" in pasted or _COPY_ASK.search(ask):
        return "edit"
    return "summarize"


def split(prompt: str) -> tuple[str, str]:
    """(the ask, the pasted material): code fences are pasted whole; of the rest, the first
    paragraph asks, and with three paragraphs or more the last one asks too (a question after
    the document); the paragraphs between are pasted."""
    fenced = _FENCE.findall(prompt)
    parts = [p for p in re.split(r"\n\s*\n", _FENCE.sub("\n\n", prompt).strip()) if p.strip()]
    if len(parts) <= 2:
        return (parts[0] if parts else ""), "\n\n".join([*parts[1:], *fenced])
    return f"{parts[0]}\n{parts[-1]}", "\n\n".join([*parts[1:-1], *fenced])


def of_request(body: Mapping[str, Any]) -> str:
    """The kind of an OpenAI-style request: its last user message (chat), or its prompt
    (completions); `chat` when it has neither as text."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return kind(_text(message.get("content")))
        return "chat"
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    return kind(prompt) if isinstance(prompt, str) else "chat"


def _text(content: object) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(p.get("text", "")) for p in content
                           if isinstance(p, dict) and p.get("type") == "text")
    return ""


def confusion(suites: Mapping[str, Sequence[str]], start: int = DESIGN
              ) -> dict[str, dict[str, int]]:
    """Rows: each suite's true kind; columns: what the rules said, over its prompts from
    `start` (by default the held-out ones)."""
    out = {}
    for true, prompts in suites.items():
        row = dict.fromkeys(KINDS, 0)
        for prompt in prompts[start:]:
            row[kind(prompt)] += 1
        out[true] = row
    return out


def accuracy(matrix: Mapping[str, Mapping[str, int]]) -> float:
    total = sum(sum(r.values()) for r in matrix.values())
    right = sum(r.get(true, 0) for true, r in matrix.items())
    return right / total if total else 0.0
