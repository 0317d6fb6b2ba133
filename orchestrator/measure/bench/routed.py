"""The route as one bench configuration (`bench --also routed`): each prompt asked of the
server the gateway would send it to (measure/route/choose.choose, from the same facts the gateway
reads), and what bench shows of the classifier (its confusion matrices)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.bench.flow import ROUTED
from specctl.orchestrator.measure.lab.servers import Config, Lab, Timed
from specctl.orchestrator.measure.prompts.workload import Workload
from specctl.orchestrator.measure.route import choose as routes
from specctl.orchestrator.measure.route import classify
from specctl.orchestrator.measure.route.choose import Route


class RoutedLab:
    """A lab where the configuration ROUTED is the route's servers: each prompt is classified
    as a request would be, and asked of its kind's server (`bench --also routed`); every other
    configuration is the inner lab's."""

    def __init__(self, inner: Lab, route: Route) -> None:
        self.inner, self.route = inner, route
        self.kinds = {i: classify.kind(p.text) for i, p in enumerate(inner.workload.prompts)}

    def facts(self, prompt: int, max_tokens: int) -> classify.Facts:
        """A prompt's request as the gateway reads one: its kind, its characters (the system
        message and every user turn: the model's earlier replies are not known before it is
        asked, and a conversation goes to one server), and its answer's length (its own, else
        the run's max_tokens, which every request of the run asks for)."""
        p = self.inner.workload.prompts[prompt]
        return classify.Facts(self.kinds[prompt], len(p.system or "")
                              + sum(len(t) for t in p.turns), p.max_tokens or max_tokens)

    @property
    def restarts(self) -> int:
        return self.inner.restarts

    @restarts.setter
    def restarts(self, value: int) -> None:
        self.inner.restarts = value

    @property
    def say(self) -> Say:
        return self.inner.say

    @property
    def workload(self) -> Workload:
        return self.inner.workload

    def _expand(self, configs: Sequence[Config]) -> list[Config]:
        out = []
        for label, plan in configs:
            if label != ROUTED:
                out.append((label, plan))
                continue
            out += [(f"{ROUTED} {m.setting}", m.plan.but(parallel=plan.parallel))
                    for m in self.route.members]
        return out

    def keep(self, configs: Sequence[Config]) -> None:
        self.inner.keep(self._expand(configs))

    def ask(self, label: str, prompt: int, max_tokens: int) -> Timed:
        if label != ROUTED:
            return self.inner.ask(label, prompt, max_tokens)
        member = routes.choose(self.route, self.facts(prompt, max_tokens))
        return replace(self.inner.ask(f"{ROUTED} {member.setting}", prompt, max_tokens),
                       label=ROUTED)

    def fits(self, plans: Sequence[Plan]) -> bool:
        """The route's own plan stands for its first server: the others are added."""
        return self.inner.fits([*plans, *(m.plan for m in self.route.members[1:])])

    def clock(self) -> float:
        return self.inner.clock()

    def close(self) -> None:
        self.inner.close()


def confusion_report(workload: Workload, suites: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """What bench shows of the classifier: its confusion matrix and accuracy on the shipped
    suites' held-out prompts, and on this workload's prompts (their category against the kind
    the router gives them)."""
    held = classify.confusion(suites)
    mine: dict[str, dict[str, int]] = {}
    for p in workload.prompts:
        row = mine.setdefault(p.category, dict.fromkeys(classify.KINDS, 0))
        row[classify.kind(p.text)] += 1
    return {"held_out": held, "held_out_accuracy": round(classify.accuracy(held), 4),
            "workload": mine, "workload_accuracy": round(classify.accuracy(mine), 4)}
