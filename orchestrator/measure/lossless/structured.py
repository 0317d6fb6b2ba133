"""Tool calls and structured output stay the target's: `bench --quality`'s check of them.

A speculative path can change a tool call and leave plain chat text alone (vLLM issue 25993: MTP
broke tool calls), so the greedy and sampling checks on the chat suites would pass it. Here the
shipped structured prompts (measure/prompts/structured.json) are asked greedily, not streamed,
of the baseline server and of each speculative setting's server, and the answers compared as a
client reads them: each tool call's name and arguments (OpenAI `tool_calls`; Anthropic Messages'
`tool_use` blocks, their `input`), and the text (a JSON schema's answer, or what a model without
tools in its chat template says instead), the calls' ids aside (a server draws them afresh).

A tool call is an action the client takes, so a setting's answer must be the baseline's, with
one allowance: numerics. Batched verification sums in another order than one-token decoding, so
a near-tie can flip in a correct engine too (SmolLM2 wrote "Design review" for the baseline's
"Design Review", 0.04 nats apart, and so did the floor). A differing answer is explained where
its tokens leave the baseline's at a token the target nearly chose (within answers.TIE nats of
its own choice, read off the baseline's logprobs: measure/lossless/answers.tie), or where the
floor (the same engine with every draft rejected: batched verification alone) gives that very
answer (for answers without tokens: Messages); every other difference is a changed output. The
floor is asked only the prompts where a setting differs that way. A difference names the prompt
and what differed ("'weather' (tools): tool call 1 (get_weather): its arguments differ at city:
"aris" where the baseline has "Paris""); an answer whose tokens are the baseline's and whose
calls are not (a serving fault after the model) is never numerics. What the allowance cannot
see: a change at a near-tie, and one that changes the floor's answers the same way (the floor's
own greedy and sampling checks are the ones on it).

A prompt of a kind the engine does not serve as started (Adapter.structured), or that the
baseline itself refuses, is not checked, and the report says so and why. The sampled prompt's
completions go to the two-sample test (measure/lossless/twosample.py) as one more category,
`structured:NAME`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.orchestrator import sanitise
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lossless import check
from specctl.orchestrator.measure.lossless import twosample as quality
from specctl.orchestrator.measure.lossless.answers import Answer, difference, read, tie
from specctl.orchestrator.measure.prompts.structured import StructuredPrompt

CATEGORY = "structured:"  # the sampled prompt's category in the sampling check: structured:NAME


@dataclass
class Side:
    """One setting's answers against the baseline's: identical, explained by numerics (a
    near-tie, or the floor's very answer), or differences."""

    label: str
    identical: int = 0
    shapes: dict[str, int] = field(default_factory=dict)  # the baseline's answers by shape
    explained: list[dict[str, str]] = field(default_factory=list)
    differences: list[dict[str, str]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return self.identical + len(self.explained) + len(self.differences)

    @property
    def passed(self) -> bool:
        return not self.differences

    def message(self) -> str:
        shapes = ", ".join(f"{n} {shape}{'' if n == 1 else 's'}"
                           for shape, n in self.shapes.items())
        line = (f"{self.identical}/{self.n} identical to the baseline's (the baseline's "
                f"answers: {shapes})")
        if self.explained:
            line += f"; numerics explain {len(self.explained)}: {_listed(self.explained)}"
        if self.differences:
            line += f"; changed: {_listed(self.differences)}"
        return line

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "n": self.n, "identical": self.identical,
                "shapes": dict(self.shapes), "explained": list(self.explained),
                "differences": list(self.differences), "message": self.message()}


def _listed(found: Sequence[Mapping[str, str]]) -> str:
    return "; ".join(f"'{d['prompt']}' ({d['kind']}): {d['what']}" for d in found)


@dataclass
class Checked:
    """The check over every setting: the prompts asked, those not checked (and why), and each
    setting's answers against the baseline's."""

    prompts: list[dict[str, str]] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    sides: dict[str, Side] = field(default_factory=dict)
    floor: bool = False  # a floor was there to explain a difference

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.sides.values())

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "prompts": list(self.prompts),
                "not_checked": list(self.not_checked), "floor": self.floor,
                "configs": {label: s.to_json() for label, s in self.sides.items()}}


@dataclass
class _Asked:
    """One prompt as the check asks it: greedily, its answer read."""

    prompt: StructuredPrompt

    def of(self, served: engine.Served) -> Answer:
        tokens = {"logprobs": True, "top_logprobs": 5} if self.prompt.api == \
            "chat/completions" else {}
        body = {**self.prompt.body, "temperature": 0, "seed": 0,
                "max_tokens": self.prompt.max_tokens, **tokens}
        return read(self.prompt.api, served.answer(self.prompt.api, body))

    def maybe(self, served: engine.Served) -> tuple[Answer | None, str | None]:
        """The answer, or None and the error the server answered instead, in words."""
        try:
            return self.of(served), None
        except ServerError as exc:
            return None, ("it answered an error where the baseline did not: "
                          f"{sanitise.line(str(exc), 200)}")


def compare(base: engine.Served, others: Mapping[str, engine.Served],
            prompts: Sequence[StructuredPrompt], kinds: frozenset[str], say: Say,
            floor: engine.Served | None = None) -> Checked:
    """Each prompt of a kind in `kinds` asked greedily of the baseline, then of every other
    server, the answers compared (answers.difference); one that differs is explained by
    numerics where it parts at a near-tie (answers.tie), or where the floor (when there is one,
    asked then) gives that very answer."""
    out = Checked(sides={label: Side(label) for label in others}, floor=floor is not None)
    for prompt in prompts:
        name = f"'{prompt.name}' ({prompt.kind})"
        if prompt.kind not in kinds:
            out.not_checked.append(f"{name}: the engine does not serve it as started")
            continue
        asked = _Asked(prompt)
        say(f"structured: {name} on the baseline")
        try:
            theirs = asked.of(base)
        except ServerError as exc:
            out.not_checked.append(f"{name}: the baseline refused it "
                                   f"({sanitise.line(str(exc), 200)})")
            continue
        out.prompts.append({"name": prompt.name, "kind": prompt.kind, "shape": theirs.shape()})
        floor_said: list[Answer | None] = []  # asked once, where a setting differs
        for label, served in others.items():
            say(f"structured: {name} on {label}")
            side = out.sides[label]
            side.shapes[theirs.shape()] = side.shapes.get(theirs.shape(), 0) + 1
            mine, refused = asked.maybe(served)
            what = difference(theirs, mine) if mine is not None else refused
            if what is None:
                side.identical += 1
                continue
            found = {"prompt": prompt.name, "kind": prompt.kind, "what": what,
                     "baseline": theirs.to_json(), "answer": mine.to_json() if mine else ""}
            near = tie(theirs, mine) if mine is not None else None
            if near is not None:
                side.explained.append({**found, "what": f"{what} ({near})"})
                continue
            if floor is not None and not floor_said:
                say(f"structured: {name} on the floor")
                floor_said.append(asked.maybe(floor)[0])
            if mine is not None and floor_said and floor_said[0] == mine:
                side.explained.append({**found, "what": f"{what} (the floor's answer too)"})
            else:
                side.differences.append(found)
    return out


def sampled(base: engine.Served, other: engine.Served, prompt: StructuredPrompt,
            how: check.Sampling, say: Say, taken: Collection[str] = ()
            ) -> quality.QualityResult:
    """The two-sample test on one structured prompt's completions (its JSON schema or tools
    kept, sampled at `how`'s temperature and top-p), its category `structured:NAME` (primed
    until it is none of `taken`, the workload's categories)."""
    messages = prompt.body["messages"]
    extra = {k: v for k, v in prompt.body.items() if k != "messages"}
    label = f"{CATEGORY}{prompt.name}"
    while label in taken:
        label += "'"
    say(f"quality: {label}: {how.samples} samples a side")
    seed = 104729 * 31
    a = check.draw(base, messages, how, seed, extra)
    b = check.draw(other, messages, how, seed + 1_000_003, extra)
    return quality.compare([quality.PromptSamples(a, b, label=label)], alpha=how.alpha,
                           positions=how.tokens, category=label)


def the_sampled(prompts: Sequence[StructuredPrompt], kinds: frozenset[str]
                ) -> StructuredPrompt | None:
    """The prompt the sampling test draws, where the engine serves its kind."""
    return next((p for p in prompts if p.sampled and p.kind in kinds), None)
