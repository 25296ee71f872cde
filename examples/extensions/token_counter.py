"""Counts the tokens every step used and reports the running total back to the session.

on_step_finish adds up the step's usage. The report goes back through the one channel an
extension has into a turn: before_turn, which appends the session's total so far to the
system prompt (mull records it in turn_configured as an `ext:token-counter:system` override).
Every step's count is also written to stderr, which mull logs.
"""

import sys

from mull_ext import serve

totals = {"input": 0, "output": 0, "steps": 0}


def on_step_finish(step, host):
    usage = step["usage"]
    totals["input"] += usage.get("inputTokens") or 0
    totals["output"] += usage.get("outputTokens") or 0
    totals["steps"] += 1
    print(
        f"token-counter: step {step['stepNumber']} used {usage.get('inputTokens') or 0} in / "
        f"{usage.get('outputTokens') or 0} out; session total {totals['input']} in / {totals['output']} out",
        file=sys.stderr,
    )


def before_turn(turn, host):
    if totals["steps"] == 0:
        return None
    report = (
        f"[token-counter] Tokens used so far in this session: {totals['input']} input, "
        f"{totals['output']} output, over {totals['steps']} steps."
    )
    system = turn["system"]
    return {"system": f"{system}\n\n{report}" if system else report}


serve(before_turn=before_turn, on_step_finish=on_step_finish)
