"""Safe call execution (rcgrpo_jax.envs.dispatch) on a toy tool class."""

import decimal
import threading

import pytest

from rcgrpo_jax.envs import dispatch
from rcgrpo_jax.envs.dispatch import FunctionSpec, Limits

STOP = threading.Event()


class Toy:
    def __init__(self):
        self.items = []

    def add(self, item: str, tags: list = []):  # noqa: B006 - the pitfall under test
        tags.append(item)
        self.items.append(item)
        return {"count": len(self.items), "tags": tags}

    def boom(self):
        raise ValueError("bad input")

    def spin(self):
        while not STOP.is_set():
            pass
        return "stopped"

    def precise(self):
        decimal.getcontext().prec = 3
        return str(decimal.Decimal(1) / decimal.Decimal(3))

    def _secret(self):
        raise AssertionError("private methods must never run")


def spec(name, properties, required=()):
    return FunctionSpec(
        name,
        "Toy",
        {"type": "object", "properties": properties, "required": list(required)},
        dispatch.method_signature(Toy, name),
    )


SPECS = {
    "add": spec("add", {"item": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}, ["item"]),
    "boom": spec("boom", {}),
    "spin": spec("spin", {}),
    "precise": spec("precise", {}),
}


def call(instance, raw, limits=Limits(call_timeout_s=1.0)):
    record, fn = dispatch.prepare_call(raw, SPECS, limits)
    if fn is not None:
        dispatch.run_call(instance, record, limits)
    return record


def test_ok_call_binds_defaults_with_fresh_copies():
    toy = Toy()
    first = call(toy, {"name": "add", "arguments": {"item": "a"}})
    second = call(toy, {"name": "add", "arguments": '{"item": "b"}'})
    assert (first.status, second.status) == ("ok", "ok")
    assert first.result == '{"count": 1, "tags": ["a"]}'
    assert second.result == '{"count": 2, "tags": ["b"]}'  # not ["a", "b"]: default not shared
    assert Toy.add.__defaults__ == ([],)
    assert first.bound == {"item": "a", "tags": []}
    assert first.arguments == {"item": "a"}


def test_given_list_argument_is_copied_before_the_tool_keeps_it():
    toy = Toy()
    tags = ["x"]
    record = call(toy, {"name": "add", "arguments": {"item": "a", "tags": tags}})
    assert tags == ["x"] and record.arguments == {"item": "a", "tags": ["x"]}


@pytest.mark.parametrize(
    "raw,fragment",
    [
        ({"name": "_secret", "arguments": {}}, "unknown function"),
        ({"name": "__class__", "arguments": {}}, "unknown function"),
        ({"name": "__import__('os').system('x')", "arguments": {}}, "unknown function"),
        ({"name": ["add"], "arguments": {}}, "unknown function"),
        ({"arguments": {}}, "unknown function"),
        ("add(item='a')", "unknown function"),
        ({"name": "add", "arguments": {}}, "missing required argument 'item'"),
        ({"name": "add", "arguments": {"item": 3}}, "'item' must be of type string"),
        ({"name": "add", "arguments": {"item": "a", "extra": 1}}, "unexpected argument 'extra'"),
        ({"name": "add", "arguments": '{"item": NaN}'}, "not valid JSON"),
        ({"name": "add", "arguments": "[" * 100_000 + "]" * 100_000}, "not valid JSON"),
        ({"name": "add", "arguments": "not json"}, "not valid JSON"),
    ],
)
def test_rejected_calls_do_not_run(raw, fragment):
    toy = Toy()
    record = call(toy, raw)
    assert record.status == "rejected"
    assert record.result.startswith("Error: ") and fragment in record.result
    assert toy.items == []


def test_raising_call_is_reported_like_bfcl():
    record = call(Toy(), {"name": "boom", "arguments": {}})
    assert (record.status, record.result) == ("error", "Error during execution: bad input")


def test_numeric_context_is_restored():
    before = decimal.getcontext().prec
    assert call(Toy(), {"name": "precise", "arguments": {}}).result == "0.333"
    assert decimal.getcontext().prec == before


def test_timeout_on_main_thread_uses_the_alarm():
    STOP.clear()
    record = call(Toy(), {"name": "spin", "arguments": {}}, Limits(call_timeout_s=0.2))
    assert record.status == "timeout" and "time limit" in record.result


def test_timeout_off_main_thread_uses_a_worker_thread():
    STOP.clear()
    box = {}
    worker = threading.Thread(
        target=lambda: box.update(r=call(Toy(), {"name": "spin", "arguments": {}}, Limits(call_timeout_s=0.2)))
    )
    worker.start()
    worker.join(10)
    STOP.set()  # let the abandoned call finish
    assert box["r"].status == "timeout"


def test_render_result_follows_bfcl():
    assert dispatch.render_result("x") == "x"
    assert dispatch.render_result({"a": 1}) == '{"a": 1}'
    assert dispatch.render_result({"a": decimal.Decimal("1.5")}) == "{'a': Decimal('1.5')}"
    assert dispatch.render_result(None) == "None"
    assert dispatch.render_result([1]) == "[1]"


def test_cost_guards():
    assert dispatch.COST_GUARDS[("MathAPI", "power")]({"base": 10, "exponent": 10**9})
    assert dispatch.COST_GUARDS[("MathAPI", "power")]({"base": 2, "exponent": 8}) is None
    assert dispatch.COST_GUARDS[("MathAPI", "power")]({"base": 10.0, "exponent": 1e9}) is None
    assert dispatch.COST_GUARDS[("MathAPI", "logarithm")]({"precision": 10**6})


def test_tool_results_do_not_depend_on_the_process_numeric_precision():
    """MathAPI's `logarithm` sets the process-wide mpmath.mp.dps and returns an mpf, whose printed digits
    follow mp.dps: calls run and are rendered at the libraries' default precision, and the caller's is
    restored, so an expert trajectory is the same whatever ran before it in the process."""
    import json

    import mpmath

    from rcgrpo_jax.data import trajectories
    from rcgrpo_jax.envs import bfcl

    task = bfcl.get_task("multi_turn_base_57")  # its ground truth calls logarithm
    before = mpmath.mp.dps
    try:
        mpmath.mp.dps = 15
        a = json.dumps(trajectories.expert_trajectory(task)["messages"])
        mpmath.mp.dps = 40
        b = json.dumps(trajectories.expert_trajectory(task)["messages"])
        assert mpmath.mp.dps == 40  # the caller's precision is restored
    finally:
        mpmath.mp.dps = before
    assert "logarithm" in a and a == b
