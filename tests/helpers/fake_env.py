"""A two-turn adder world following the Environment protocol, small enough for model rollouts on CPU."""

from __future__ import annotations

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


class AdderEnv:
    def __init__(self, questions=("What is 2 plus 3?", "And 4 plus 5?"), answers=(5, 9), output_chars=0):
        self.questions, self.answers, self.output_chars = list(questions), list(answers), output_chars
        self.done, self.done_reason = True, None

    def reset(self):
        self.turn, self.results, self.done, self.done_reason = 0, [], False, None
        return [{"role": "user", "content": self.questions[0]}], [ADD_TOOL]

    def step(self, tool_calls):
        out = []
        for call in tool_calls:
            args = call.get("arguments", {})
            if call.get("name") == "add" and all(isinstance(args.get(k), int) for k in "ab"):
                self.results.append(args["a"] + args["b"])
                out.append(str(args["a"] + args["b"]) + "x" * self.output_chars)
            else:
                out.append(f"Error: cannot run {str(call.get('name'))[:40]!r}")
        return out

    def end_turn(self):
        self.turn += 1
        if self.turn >= len(self.questions):
            self.done, self.done_reason = True, "completed"
            return None
        return [{"role": "user", "content": self.questions[self.turn]}], [ADD_TOOL]

    def reward(self):
        return float(self.results == self.answers)

    def official_verdict(self):
        return {"valid": self.results == self.answers}

    def trace(self):
        return {"results": list(self.results)}
