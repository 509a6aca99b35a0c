#!/usr/bin/env python3
"""Sends tool-call requests to an mk-server on the GPU and records each request with its response.

    python3 gpu_requests.py URL OUT.jsonl

The requests are tests/server/tool_calls.mjs's: the shipped model asked about the weather and files
with three tools; tool_choice "required" over 40 seeds at temperature 0.8 (even seeds: two tools, one
call), and a named function (search_files, get_weather) over seeds 3-5. validate.mjs checks the
responses with ajv here, not on the GPU machine (it has no node).
"""
import json
import sys
import urllib.request

url, out_path = sys.argv[1], sys.argv[2]


def fn(name, description, parameters=None):
    f = {"name": name, "description": description}
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


tools = [
    fn("get_weather", "Current weather in a city", {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}),
    fn("search_files", "Find files by name", {
        "type": "object",
        "properties": {"pattern": {"type": "string", "pattern": "^[a-z_*.]{1,16}$"}, "limit": {"type": "integer"},
                       "recursive": {"type": "boolean"},
                       "exclude": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}},
        "required": ["pattern", "limit", "recursive", "exclude"], "additionalProperties": False}),
    fn("now", "The current time"),
]
messages = [{"role": "user", "content": "What is the weather in Paris, and which Python files are here?"}]
requests = []
for seed in range(1, 41):
    some = {"tools": tools[:2], "parallel_tool_calls": False} if seed % 2 == 0 else {"tools": tools}
    requests.append({"model": "m", "messages": messages, **some, "tool_choice": "required", "temperature": 0.8, "seed": seed,
                     "max_tokens": 1000})
for seed in (3, 4, 5):
    for name in ("search_files", "get_weather"):
        requests.append({"model": "m", "messages": messages, "tools": tools, "temperature": 0.8, "seed": seed, "max_tokens": 300,
                         "tool_choice": {"type": "function", "function": {"name": name}}})
with open(out_path, "w") as out:
    for body in requests:
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            response = json.loads(r.read())
        out.write(json.dumps({"request": body, "response": response}) + "\n")
print(f"{len(requests)} requests answered")
