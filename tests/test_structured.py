"""Tool calls and structured output stay the target's (measure/lossless/structured.py): answers
read as a client reads them, differences said in words, the shipped prompts valid, the verdict
and the certificate; the planted break of tests/broken_tools.py alters what it says. Fast: no
engine (tests/test_structured_real.py runs them on real llama-server processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.errors import SpecctlError, StateError
from specctl.orchestrator.measure.bench import verdicts
from specctl.orchestrator.measure.lossless import answers, structured
from specctl.orchestrator.measure.prompts import structured as prompts
from specctl.orchestrator.measure.results import certificates as certs
from tests import broken_tools, plans
from tests.test_certificates import engine, judged, setting


def chat(name: str = "get_weather", arguments: str = '{"city": "Paris"}', content: str = ""
         ) -> dict[str, Any]:
    calls = [{"id": "abc", "type": "function", "function": {"name": name,
                                                             "arguments": arguments}}]
    return {"choices": [{"message": {"role": "assistant", "content": content,
                                     "tool_calls": calls if name else []}}]}


def messages(name: str = "convert_currency", given: Any = None) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "Sure."},
                        {"type": "tool_use", "id": "x1", "name": name,
                         "input": given if given is not None else {"amount": 250, "to": "USD"}}]}


def test_answers_are_read_as_a_client_reads_them_ids_aside() -> None:
    got = answers.read("chat/completions", chat())
    assert got == answers.Answer((answers.Call("get_weather", '{"city": "Paris"}'),), "")
    assert got.shape() == "tool call"
    other = chat()
    other["choices"][0]["message"]["tool_calls"][0]["id"] = "another id, drawn afresh"
    assert answers.read("chat/completions", other) == got
    assert answers.read("messages", messages()) == answers.Answer(
        (answers.Call("convert_currency", '{"amount": 250, "to": "USD"}'),), "Sure.")
    schema = answers.read("chat/completions", chat(name="", content='{"title": "Dune"}'))
    assert schema.shape() == "JSON answer" and not schema.calls
    cut = answers.read("chat/completions", chat(name="", content='{"title": "Du'))
    assert cut.shape() == "unfinished JSON answer"
    assert answers.read("chat/completions", chat(name="", content="Hi")).shape() == \
        "text answer"
    with pytest.raises(SpecctlError) as bad:
        answers.read("chat/completions", {"error": "nope"})
    assert "not a chat/completions reply" in str(bad.value)


def test_each_difference_is_said_in_words() -> None:
    def said(base: dict[str, Any], other: dict[str, Any], api: str = "chat/completions"
             ) -> str | None:
        return answers.difference(answers.read(api, base), answers.read(api, other))

    assert said(chat(), chat()) is None
    assert said(chat(), chat(arguments='{"city": "aris"}')) == (
        'tool call 1 (get_weather): its arguments differ at city: "aris" where the baseline '
        'has "Paris"')
    assert said(chat(), chat(arguments='{"city": "Paris", "unit": "celsius"}')) == (
        'tool call 1 (get_weather): its arguments differ at unit: "celsius" where the baseline '
        "has nothing")
    assert said(chat(), chat(arguments='{"city":  "Paris"}')) == (
        "tool call 1 (get_weather): its arguments differ in their formatting, from character "
        '9: " \\"Paris\\"}" where the baseline has "\\"Paris\\"}"')
    assert said(chat(arguments='{"city": "Design Review'), chat(arguments='{"city": "Design rev')
                ) == ("tool call 1 (get_weather): its arguments differ from character 17: "
                      '"rev" where the baseline has "Review"')  # cut by the answer's length
    assert said(chat(), chat(name="get_time")) == (
        'tool call 1 is "get_time" where the baseline called "get_weather"')
    assert said(chat(), chat(name="", content="It is sunny")) == (
        '0 tool call(s) (none) where the baseline made 1 ("get_weather")')
    assert said(chat(name="", content='{"year": 1965}'), chat(name="", content='{"year": 1966}')
                ) == 'its text differs from character 12: "6}" where the baseline has "5}"'
    assert said(messages(), messages(given={"amount": 25, "to": "USD"}), "messages") == (
        "tool call 1 (convert_currency): its arguments differ at amount: 25 where the baseline "
        "has 250")
    long = "x" * 200 + "\n\x1b[2J"
    line = said(chat(arguments=json.dumps({"a": "y"})), chat(arguments=json.dumps({"a": long})))
    assert line is not None and "..." in line and "\x1b" not in line and "\n" not in line


def steps(*tokens: tuple[str, float, dict[str, float]]) -> dict[str, Any]:
    """A chat completion's `logprobs`: each token, its log-probability, the likeliest there."""
    return {"content": [{"token": t, "logprob": lp, "top_logprobs": [
        {"token": k, "logprob": v} for k, v in top.items()]} for t, lp, top in tokens]}


def test_a_near_tie_is_read_off_the_baselines_tokens() -> None:
    """Answers that part where the target nearly chose the other's token (SmolLM2's " Review"
    and " review", 0.04 nats apart) are what numerics flip; a token it gave much less, or the
    same tokens read as another call, are not."""
    def answer(*tokens: tuple[str, float, dict[str, float]]) -> answers.Answer:
        reply = chat(arguments="".join(t for t, _, _ in tokens))
        reply["choices"][0]["logprobs"] = steps(*tokens)
        return answers.read("chat/completions", reply)

    base = answer(("Design", -0.1, {}), (" Review", -0.68, {" Review": -0.68, " review": -0.72}))
    flipped = answer(("Design", -0.1, {}), (" review", -0.70, {}))
    assert answers.tie(base, flipped) == (
        'at token 1 the target nearly chose it: " review" 0.04 nats below " Review"')
    far = answer(("Design", -0.1, {}), (" Rev", -0.2, {}))
    assert answers.tie(base, far) is None  # not among the likeliest the baseline weighed
    unlikely = answer(("Design", -0.1, {}), (" review", -0.70, {}))
    assert answers.tie(answer(("Design", -0.1, {}), (" Review", -0.1, {
        " Review": -0.1, " review": -2.5})), unlikely) is None
    assert answers.tie(base, base) is None  # the same tokens: nothing numerics flipped
    # a near-tie late, but the answers part earlier, in what the shared tokens wrote: a fault
    relayed = answers.Answer((answers.Call("get_weather", "Dasign review"),), "",
                             flipped.steps)
    assert answers.tie(base, relayed) is None
    assert answers.tie(answers.read("chat/completions", chat()), flipped) is None  # no tokens


def test_the_shipped_prompts_ask_for_each_kind_and_one_is_sampled() -> None:
    found = prompts.load()
    assert {p.kind for p in found} == set(prompts.KINDS)
    assert [p.name for p in found if p.sampled] == ["book"]
    assert all(p.body.get("tool_choice") for p in found if p.kind != "json_schema")
    assert all("max_tokens" not in p.body and "model" not in p.body for p in found)
    sampled = structured.the_sampled(found, frozenset({"json_schema"}))
    assert sampled is not None and sampled.name == "book"
    assert structured.the_sampled(found, frozenset({"tools"})) is None


@pytest.mark.parametrize("broken, why", [
    ({"temperature": 0.5}, "the check sets those"),
    ({"tools": [{}], "response_format": {"type": "json_schema", "json_schema": {}}}, "one"),
    ({}, "tools or a json_schema"),
])
def test_a_malformed_prompt_set_is_refused_in_one_line(broken: dict[str, Any], why: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **broken}
    text = json.dumps({"name": "x", "prompts": [{"name": "a", "api": "chat/completions",
                                                 "max_tokens": 8, "body": body}]})
    with pytest.raises(SpecctlError) as bad:
        prompts.load(text)
    assert "structured-output prompts are malformed" in str(bad.value) and why in str(bad.value)
    assert "\n" not in str(bad.value)


def test_llamacpp_serves_tool_calls_where_its_jinja_templates_are_on() -> None:
    def built(*flags: str) -> Installed:
        return Installed(backend="llamacpp", version="b1", dialect="spec-type",
                         flags=frozenset({"--metrics", *flags}))

    plan = plans.plan()
    adapter = LlamaCpp()
    assert adapter.structured(plan, built("--jinja", "--no-jinja")) == {
        "tools", "tool_use", "json_schema"}
    assert adapter.structured(plan, built("--jinja")) == {"json_schema"}  # before: off
    assert adapter.structured(plan.but(extra_args=("--jinja",)), built("--jinja")) == {
        "tools", "tool_use", "json_schema"}
    assert adapter.structured(plan.but(extra_args=("--no-jinja",)),
                              built("--jinja", "--no-jinja")) == {"json_schema"}


class Canned:
    """A server that answers each structured prompt with a canned reply (the comparison logic
    alone; tests/test_structured_real.py asks real servers), counting what it was asked."""

    def __init__(self, **replies: dict[str, Any]) -> None:
        self.replies, self.asked = replies, 0

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        found = self.replies[body["messages"][0]["content"][:5]]
        if "refused" in found:
            from specctl.orchestrator.errors import ServerError

            raise ServerError(found["refused"])
        return found


def run(base: Canned, others: dict[str, Canned], asked: list[prompts.StructuredPrompt],
        kinds: frozenset[str], floor: Canned | None = None) -> structured.Checked:
    return structured.compare(cast(Any, base), cast(Any, others), asked, kinds, lambda _m: None,
                              cast(Any, floor))


def test_a_difference_is_numerics_only_where_the_floor_gives_that_very_answer() -> None:
    weather, book = prompts.load()[0], prompts.load()[3]
    asked = [weather, book]
    paris, aris = chat(arguments='{"city": "Paris"}'), chat(arguments='{"city": "aris"}')
    dune = chat(name="", content='{"title": "Dune"}')
    base = Canned(**{"What ": paris, "Descr": dune})
    flipped = Canned(**{"What ": aris, "Descr": dune})
    same = Canned(**{"What ": paris, "Descr": dune})
    floor = Canned(**{"What ": aris, "Descr": dune})
    kinds = frozenset(prompts.KINDS)
    got = run(base, {"draft k=3": flipped, "ngram k=8": same}, asked, kinds, floor)
    assert got.passed and got.sides["ngram k=8"].identical == 2
    side = got.sides["draft k=3"]
    assert side.identical == 1 and len(side.explained) == 1 and not side.differences
    assert "numerics explain 1: 'weather' (tools): tool call 1 (get_weather): its arguments " \
        "differ at city" in side.message() and "(the floor's answer too)" in side.message()
    assert floor.asked == 1  # only the prompt where a setting differs
    honest_floor = Canned(**{"What ": paris, "Descr": dune})
    got = run(base, {"draft k=3": flipped}, asked, kinds, honest_floor)
    assert not got.passed and got.sides["draft k=3"].differences[0]["prompt"] == "weather"
    assert "changed: 'weather' (tools): tool call 1 (get_weather): its arguments differ" in \
        got.sides["draft k=3"].message()
    alone = run(base, {"draft k=3": flipped}, asked, kinds)
    assert not alone.passed and not alone.floor
    # the tokens say it was a near-tie: numerics, without asking the floor
    paris["choices"][0]["logprobs"] = steps(('{"city": "', -0.1, {}), (
        "Paris", -0.60, {"Paris": -0.60, "aris": -0.65}), ('"}', -0.1, {}))
    aris["choices"][0]["logprobs"] = steps(('{"city": "', -0.1, {}), ("aris", -0.6, {}),
                                           ('"}', -0.1, {}))
    asked_floor = Canned(**{"What ": paris, "Descr": dune})
    near = run(base, {"draft k=3": flipped}, asked, kinds, asked_floor)
    assert near.passed and asked_floor.asked == 0
    assert "0.05 nats below" in near.sides["draft k=3"].message()
    # the same tokens read as another call: a fault after the model, never numerics
    relayed = Canned(**{"What ": {**aris, "choices": [{**aris["choices"][0],
                                                        "logprobs": paris["choices"][0][
                                                            "logprobs"]}]}, "Descr": dune})
    assert not run(base, {"draft k=3": relayed}, asked, kinds, honest_floor).passed


def test_a_kind_not_served_or_refused_by_the_baseline_is_not_checked_and_said() -> None:
    weather, currency = prompts.load()[0], prompts.load()[2]
    base = Canned(**{"What ": chat(), "How m": {"refused": "404 Not Found"}})
    other = Canned(**{"What ": chat(), "How m": messages()})
    got = run(base, {"draft k=3": other}, [weather, currency], frozenset({"tool_use"}))
    assert got.not_checked == [
        "'weather' (tools): the engine does not serve it as started",
        "'currency' (tool_use): the baseline refused it (404 Not Found)"]
    assert got.prompts == [] and got.sides["draft k=3"].n == 0 and other.asked == 0


def checked(passed: bool) -> dict[str, Any]:
    """A report's `structured` section: the tested setting's answers, one difference or none."""
    differences = [] if passed else [{"prompt": "weather", "kind": "tools", "what": (
        'tool call 1 (get_weather): its arguments differ at city: "aris" where the baseline '
        'has "Paris"')}]
    side = structured.Side("draft k=3", identical=5 - len(differences),
                           shapes={"tool call": 3, "JSON answer": 2},
                           differences=differences)
    return structured.Checked(prompts=[{"name": "weather", "kind": "tools"}],
                              not_checked=["'currency' (tool_use): the baseline refused it"],
                              sides={"draft k=3": side}).to_json()


def test_a_changed_tool_call_is_an_output_change_naming_the_prompt() -> None:
    import numpy as np

    from tests.test_verdicts import report

    result = report(np.random.default_rng(3), lambda: None)
    result["structured"] = checked(passed=False)
    verdicts.judge(result, counts_drafts=True)
    assert result["outcome"] == "output changed" and result["usable"] == []
    assert result["verdict"].startswith(
        "output changed: draft k=3 must not be used (tool calls and structured output: 4/5 "
        "identical to the baseline's (the baseline's answers: 3 tool calls, 2 JSON answers); "
        "changed: 'weather' (tools): tool call 1 (get_weather): its arguments differ at city: "
        "\"aris\"")
    again = report(np.random.default_rng(3), lambda: None)
    again["structured"] = checked(passed=True)
    assert verdicts.judge(again, counts_drafts=True)["outcome"] == "speed"


def test_the_certificate_records_the_check_and_fails_with_it(tmp_path: Path) -> None:
    folder = certs.folder(tmp_path / "st")
    built, tested = engine(tmp_path), setting(tmp_path)
    good = {**judged(), "structured": checked(passed=True)}
    certs.save(folder, certs.from_report("demo", built, tested, good))
    found = certs.find(folder, tested, built, "demo")
    assert found.state == "passing"
    assert found.structured_line() == (
        "tool calls and structured output: the target's, 5/5 answers identical to the "
        "baseline's (3 tool calls among them); 1 prompt(s) not checked")
    assert found.to_json()["structured"] == found.structured_line()
    bad = {**judged(), "structured": checked(passed=False)}
    certs.save(folder, certs.from_report("demo", built, tested, bad))
    found = certs.find(folder, tested, built, "demo")
    assert found.state == "failing"
    assert (found.structured_line() or "").startswith(
        "tool calls and structured output: CHANGED, 4/5 answers identical to the baseline's (3 "
        "tool calls among them): 'weather' (tools): tool call 1 (get_weather): its arguments "
        "differ")
    # a certificate from before the check: said so, not taken for a pass of it
    certs.save(folder, certs.from_report("demo", built, tested, judged()))
    older = certs.find(folder, tested, built, "demo")
    assert older.state == "passing" and "not tested" in (older.structured_line() or "")


def test_a_tampered_structured_record_is_set_aside(tmp_path: Path) -> None:
    folder = certs.folder(tmp_path / "st")
    built, tested = engine(tmp_path), setting(tmp_path)
    path = certs.save(folder, certs.from_report("demo", built, tested,
                                                {**judged(), "structured": checked(False)}))
    data = json.loads(path.read_text())
    data["structured"]["identical"] = 999  # more than the prompts there can be
    path.write_text(json.dumps(data))
    with pytest.raises(StateError):
        certs.find(folder, tested, built)
    assert certs.find(folder, tested, built).state == "none"


def test_the_planted_break_alters_the_first_tool_call_and_nothing_else() -> None:
    reply = chat(arguments='{"city": "Paris", "unit": "celsius"}')
    assert broken_tools.alter("/v1/chat/completions", reply)
    assert json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"][
        "arguments"]) == {"city": "aris", "unit": "celsius"}
    numbers = chat(arguments='{"n": 3}')
    assert broken_tools.alter("/v1/chat/completions", numbers)
    assert numbers["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_weather_"
    used = messages(given={"to": "USD", "amount": 250})
    assert broken_tools.alter("/v1/messages", used)
    assert used["content"][1]["input"] == {"to": "SD", "amount": 250}
    text = chat(name="", content="Paris")
    assert not broken_tools.alter("/v1/chat/completions", text)
    assert text == chat(name="", content="Paris")
    assert broken_tools.rewritten("/v1/chat/completions", b"not json") == b"not json"
