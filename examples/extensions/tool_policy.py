"""A policy extension that keeps named tools away from the model.

Extension before_tool_call hooks are observation-only (Think's contract, which mull keeps):
their return value is discarded, so an extension cannot block a call once the model made it.
What an extension may do is set scalar turn settings in before_turn, and activeTools is one:
this extension removes the blocked tools from the turn's active tools, so the model is never
offered them, and a call the model makes anyway is refused by mull as an unavailable tool.
before_tool_call still watches, and reports on stderr any blocked name it sees.

Blocked names come from MULL_BLOCKED_TOOLS (comma-separated), set in tool_policy.toml.
"""

import os
import sys

from mull_ext import serve

BLOCKED = {name.strip() for name in os.environ.get("MULL_BLOCKED_TOOLS", "").split(",") if name.strip()}


def before_turn(turn, host):
    allowed = turn["activeTools"] if turn["activeTools"] is not None else turn["toolNames"]
    narrowed = [name for name in allowed if name not in BLOCKED]
    if narrowed == allowed:
        return None
    return {"activeTools": narrowed}


def before_tool_call(call, host):
    if call["toolName"] in BLOCKED:
        print(f"tool-policy: the model called blocked tool {call['toolName']!r}", file=sys.stderr)


serve(before_turn=before_turn, before_tool_call=before_tool_call)
